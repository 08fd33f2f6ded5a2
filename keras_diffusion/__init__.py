"""keras_diffusion: train image diffusion models with Keras `fit`, fast."""

from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.schedules import NoiseSchedule

__version__ = "0.1.0"

__all__ = ["DiffusionModel", "NoiseSchedule", "UNet", "__version__"]
