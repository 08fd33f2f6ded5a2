"""Checkpoints of other ecosystems: diffusers `UNet2DModel` pipelines and
`UNet2DConditionModel`s; keras-hub's Stable Diffusion 3 (the `keras-hub`
extra, imported on first use)."""

from keras_diffusion.interop.diffusers import (
    default_sampler,
    from_diffusers,
    load_checkpoint,
)
from keras_diffusion.interop.diffusers_export import to_diffusers
from keras_diffusion.interop.keras_hub_export import to_keras_hub
from keras_diffusion.interop.keras_hub_sd3 import from_keras_hub

__all__ = [
    "default_sampler",
    "from_diffusers",
    "from_keras_hub",
    "load_checkpoint",
    "to_diffusers",
    "to_keras_hub",
]
