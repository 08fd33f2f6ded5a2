"""KIDCallback: the kernel distance of samples to real images, logged each epoch."""

import math

import numpy as np

from keras_diffusion.callbacks.periodic_sampling import PeriodicSampling
from keras_diffusion.metrics import KernelDistance


class KIDCallback(PeriodicSampling):
    """Logs the kernel distance (KID) of a fixed sample every `every` epochs.

    Generates `num_images` images from a fixed seed, maps them and the real
    images through `feature_extractor`, and puts the mean and standard
    deviation of `keras_diffusion.metrics.KernelDistance` into `logs` as
    `name` and `name + "_std"` (so `CSVLogger`, `TensorBoard` and `History`,
    placed after this callback, record them). On the other epochs both are
    NaN, which keeps the CSV columns fixed from the first epoch.

    Args:
        real_images: array `(N, H, W, C)` in [-1, 1], the reference sample.
        feature_extractor: a Keras model or callable mapping images in
            [-1, 1] to `(batch, d)` features, `None` for raw pixels, or
            `"inception_v3"`; see `keras_diffusion.metrics.KernelDistance`.
        num_features: int or `None` (read from the extractor when it can be).
            Defaults to `None`.
        num_images: int, generated images per evaluation. Defaults to `200`.
        every: int, evaluate after every `every`-th epoch. Defaults to `1`.
        seed: int, seeds sampling, labels and subsets. Defaults to `0`.
        sampler: sampler for `generate`, or `None`. Defaults to `None`.
        guidance_scale: float, for a conditional model, whose labels are
            drawn uniformly at random. Defaults to `1.0`.
        num_subsets: int, KID subsets. Defaults to `10`.
        name: str, the key in `logs`. Defaults to `"kid"`.

    Example:

    ```python
    kid = KIDCallback(real, feature_extractor=classifier_features, every=5)
    model.fit(ds, epochs=20, callbacks=[kid, keras.callbacks.CSVLogger("log.csv")])
    ```
    """

    def __init__(
        self,
        real_images,
        feature_extractor,
        num_features=None,
        num_images=200,
        every=1,
        seed=0,
        sampler=None,
        guidance_scale=1.0,
        num_subsets=10,
        name="kid",
    ):
        real_images = np.asarray(real_images, dtype=np.float32)
        if real_images.ndim != 4 or len(real_images) < 2:
            raise ValueError(
                "Argument `real_images` must be an (N, H, W, C) array with N >= 2. "
                f"Received: real_images with shape={real_images.shape}"
            )
        super().__init__(num_images, every, seed, sampler, guidance_scale)
        self.name = name
        subset_size = max(2, min(len(real_images), self.num_images))
        self.metric = KernelDistance(
            feature_extractor=feature_extractor,
            num_features=num_features,
            num_subsets=num_subsets,
            subset_size=subset_size,
            max_samples=max(subset_size, len(real_images), self.num_images),
            seed=seed,
            name=name,
        )
        self.real_images = real_images

    def evaluate(self):
        """Samples and returns `(kid_mean, kid_std)` as Python floats."""
        kwargs = {}
        num_classes = getattr(self.model, "num_classes", None)
        if num_classes is not None:
            rng = np.random.default_rng(self.seed)
            kwargs["labels"] = rng.integers(0, num_classes, self.num_images).tolist()
            kwargs["guidance_scale"] = self.guidance_scale
        generated = self.model.generate(
            self.num_images, sampler=self.sampler, seed=self.seed, verbose=0, **kwargs
        )
        self.metric.reset_state()
        self.metric.update_state(real_images=self.real_images)
        self.metric.update_state(generated_images=generated)
        result = self.metric.result()
        return float(result[self.name]), float(result[f"{self.name}_std"])

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        if self.due(epoch):
            logs[self.name], logs[f"{self.name}_std"] = self.evaluate()
        else:
            logs[self.name] = logs[f"{self.name}_std"] = math.nan
