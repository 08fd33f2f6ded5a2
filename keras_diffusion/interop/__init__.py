"""Checkpoints of other ecosystems: diffusers `UNet2DModel` pipelines and
`UNet2DConditionModel`s."""

from keras_diffusion.interop.diffusers import (
    default_sampler,
    from_diffusers,
    load_checkpoint,
)
from keras_diffusion.interop.diffusers_export import to_diffusers

__all__ = ["default_sampler", "from_diffusers", "load_checkpoint", "to_diffusers"]
