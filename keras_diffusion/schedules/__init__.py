"""The forward processes: how images are noised in training, and what the
samplers step over.

- `NoiseSchedule`: variance preserving (DDPM) betas, as diffusers' schedulers.
- `EDMSchedule`: Karras et al.'s sigmas and preconditioning.
- `FlowMatchSchedule`: flow matching's straight path (rectified flow).
"""

from keras_diffusion.schedules.edm_schedule import EDMSchedule
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule
from keras_diffusion.schedules.noise_schedule import (
    BETA_SCHEDULES,
    NoiseSchedule,
    rescale_betas_zero_snr,
)

__all__ = [
    "BETA_SCHEDULES",
    "EDMSchedule",
    "FlowMatchSchedule",
    "NoiseSchedule",
    "rescale_betas_zero_snr",
]
