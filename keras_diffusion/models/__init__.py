from keras_diffusion.adapters.lora_model import enable_lora, merge_lora
from keras_diffusion.averages.ema import ExponentialMovingAverage
from keras_diffusion.models.diffusion_model import DiffusionModel
from keras_diffusion.models.unet import UNet

__all__ = [
    "DiffusionModel",
    "ExponentialMovingAverage",
    "UNet",
    "enable_lora",
    "merge_lora",
]
