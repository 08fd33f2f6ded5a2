"""What a model is conditioned on: class labels or text, each with its null
for classifier-free guidance."""

from keras_diffusion.conditioning.labels import ClassLabels
from keras_diffusion.conditioning.text import TextConditioning, conditioned_on_text

__all__ = ["ClassLabels", "TextConditioning", "conditioned_on_text"]
