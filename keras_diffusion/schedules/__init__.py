"""The forward processes: how images are noised in training, and what the
samplers step over. Each is a `Process` (`schedules.process`): it answers
every question specific to it, and nothing outside this package asks which
process it is.

- `NoiseSchedule`: variance preserving (DDPM) betas, as diffusers' schedulers.
- `EDMSchedule`: Karras et al.'s sigmas and preconditioning.
- `FlowMatchSchedule`: flow matching's straight path (rectified flow).
- `ConsistencySchedule`: a few-step process on that path (one or two calls).
- `MeanFlowSchedule`: the mean velocity over an interval (one call).
"""

from keras_diffusion.schedules.consistency_schedule import ConsistencySchedule
from keras_diffusion.schedules.edm_schedule import EDMSchedule
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule
from keras_diffusion.schedules.levels import Levels, Spacing
from keras_diffusion.schedules.meanflow_schedule import MeanFlowSchedule
from keras_diffusion.schedules.noise_schedule import (
    BETA_SCHEDULES,
    NoiseSchedule,
    rescale_betas_zero_snr,
)
from keras_diffusion.schedules.process import DEFAULT_SAMPLERS, Process, sigma_tables
from keras_diffusion.schedules.registry import PROCESSES, register_process
from keras_diffusion.utils.settings import Setting

__all__ = [
    "BETA_SCHEDULES",
    "DEFAULT_SAMPLERS",
    "Levels",
    "PROCESSES",
    "Process",
    "Spacing",
    "register_process",
    "Setting",
    "sigma_tables",
    "ConsistencySchedule",
    "EDMSchedule",
    "FlowMatchSchedule",
    "MeanFlowSchedule",
    "NoiseSchedule",
    "rescale_betas_zero_snr",
]
