from keras_diffusion.adapters.lora_model import enable_lora, merge_lora
from keras_diffusion.averages.ema import ExponentialMovingAverage
from keras_diffusion.models.controlled import enable_controlnet
from keras_diffusion.models.controlnet import ControlNet
from keras_diffusion.models.diffusion_model import DiffusionModel
from keras_diffusion.models.unet import UNet

__all__ = [
    "ControlNet",
    "DiffusionModel",
    "ExponentialMovingAverage",
    "UNet",
    "enable_controlnet",
    "enable_lora",
    "merge_lora",
]
