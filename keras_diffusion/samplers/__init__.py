"""Samplers: reverse processes from noise to images, each one compiled loop."""

from keras_diffusion.samplers.base import PREDICTION_TYPES, TIMESTEP_SPACINGS, Sampler
from keras_diffusion.samplers.ddim import DDIMSampler
from keras_diffusion.samplers.ddpm import DDPMSampler
from keras_diffusion.samplers.dpm_solver import DPMSolverSampler
from keras_diffusion.samplers.euler import EulerSampler

__all__ = [
    "DDIMSampler",
    "DDPMSampler",
    "DPMSolverSampler",
    "EulerSampler",
    "PREDICTION_TYPES",
    "Sampler",
    "TIMESTEP_SPACINGS",
]
