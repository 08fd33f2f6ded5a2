"""What a model is conditioned on: class labels or text, each with its null
for classifier-free guidance."""

from keras_diffusion.conditioning.labels import ClassLabels
from keras_diffusion.conditioning.text import TextConditioning

__all__ = ["ClassLabels", "TextConditioning"]
