"""keras_diffusion: train image diffusion models with Keras `fit`, fast."""

from keras_diffusion import (
    callbacks,
    data,
    diagnostics,
    distribute,
    latent,
    metrics,
    samplers,
)
from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
)
from keras_diffusion.schedules import NoiseSchedule

__version__ = "0.1.0"

__all__ = [
    "DDIMSampler",
    "DDPMSampler",
    "DPMSolverSampler",
    "DiffusionModel",
    "EulerSampler",
    "NoiseSchedule",
    "UNet",
    "__version__",
    "callbacks",
    "data",
    "diagnostics",
    "distribute",
    "latent",
    "metrics",
    "samplers",
]
