"""What `SampleGrid` and `KIDCallback` share: sampling the model from a fixed
seed every few epochs."""

import keras

from keras_diffusion.utils.checks import check_int


class PeriodicSampling(keras.callbacks.Callback):
    """Base of the callbacks that sample `num_images` images from a fixed
    seed after every `every`-th epoch.

    Args:
        num_images: int >= 1, images a sampling.
        every: int >= 1, sample after every `every`-th epoch.
        seed: int, the sampling seed.
        sampler: a `keras_diffusion.samplers` sampler, or `None` for the
            model's default.
        guidance_scale: float, classifier-free guidance weight.
    """

    def __init__(self, num_images, every, seed, sampler, guidance_scale):
        super().__init__()
        self.num_images = check_int("num_images", num_images, 1)
        self.every = check_int("every", every, 1)
        self.seed = seed
        self.sampler = sampler
        self.guidance_scale = guidance_scale

    def due(self, epoch):
        """Whether the 0-based `epoch` is an `every`-th one."""
        return (epoch + 1) % self.every == 0
