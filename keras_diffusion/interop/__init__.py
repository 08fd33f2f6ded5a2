"""Checkpoints of other ecosystems: diffusers `UNet2DModel` pipelines."""

from keras_diffusion.interop.diffusers import (
    default_sampler,
    from_diffusers,
    load_checkpoint,
    to_diffusers,
)

__all__ = ["default_sampler", "from_diffusers", "load_checkpoint", "to_diffusers"]
