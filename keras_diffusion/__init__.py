"""keras_diffusion: train image diffusion models with Keras `fit`, fast."""

from keras_diffusion.schedules import NoiseSchedule

__version__ = "0.1.0"

__all__ = ["NoiseSchedule", "__version__"]
