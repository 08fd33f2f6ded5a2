"""What a model is conditioned on: class labels or text (an encoder trained
with the model, or a frozen pretrained one), each with its null for
classifier-free guidance."""

from keras_diffusion.conditioning.frozen import (
    FrozenTextConditioning,
    pack_pooled,
    split_pooled,
)
from keras_diffusion.conditioning.keras_hub_clip import (
    CLIP_PRESETS,
    KerasHubCLIPEncoder,
    clip_conditioning,
)
from keras_diffusion.conditioning.labels import ClassLabels
from keras_diffusion.conditioning.text import TextConditioning, conditioned_on_text

__all__ = [
    "CLIP_PRESETS",
    "ClassLabels",
    "FrozenTextConditioning",
    "KerasHubCLIPEncoder",
    "TextConditioning",
    "clip_conditioning",
    "conditioned_on_text",
    "pack_pooled",
    "split_pooled",
]
