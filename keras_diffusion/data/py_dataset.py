"""A `keras.utils.PyDataset` over NumPy arrays, for `fit` without `tf.data`."""

import math

import keras
import numpy as np

from keras_diffusion.data import pipeline
from keras_diffusion.utils.checks import check_bool, check_int, check_seed


class ArrayPyDataset(keras.utils.PyDataset):
    """Batches of NumPy images scaled to [-1, 1], as a `keras.utils.PyDataset`.

    The same data and scaling as `from_arrays`, for code that prefers a
    `PyDataset` (worker threads or processes, no TensorFlow graph). The
    shuffle order and the flips depend only on `seed`, the epoch and the
    batch index, so they are reproducible with any number of workers.

    Args:
        images: array `(N, H, W)` or `(N, H, W, C)`, channels last.
        labels: optional integer class ids `(N,)`; batches are then
            `(images, labels)` with int32 labels. Defaults to `None`.
        batch_size: int, images a batch. Defaults to `32`.
        value_range: `(low, high)` of the pixel values, or `None` to infer it
            as `from_arrays` does. Defaults to `None`.
        shuffle: bool, a new order every epoch. Defaults to `True`.
        flip: bool, random horizontal flips. Defaults to `False`.
        seed: int or `None`. Defaults to `None`.
        drop_remainder: bool, drop a last partial batch. Defaults to `False`.
        **kwargs: `workers`, `use_multiprocessing`, `max_queue_size` of
            `keras.utils.PyDataset`.

    Example:

    ```python
    data = ArrayPyDataset(x_uint8, batch_size=64, seed=0)
    diffusion_model.fit(data, epochs=2)
    ```
    """

    def __init__(
        self,
        images,
        labels=None,
        batch_size=32,
        shuffle=True,
        flip=False,
        seed=None,
        value_range=None,
        drop_remainder=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        seed = check_seed(seed)
        self.images = pipeline.check_images(images)
        low, high = pipeline.infer_value_range(self.images, value_range)
        self.value_range = (low, high)
        self.labels = None
        if labels is not None:
            self.labels = pipeline.check_labels(labels, len(self.images))
        self.shuffle = check_bool("shuffle", shuffle)
        self.flip = check_bool("flip", flip)
        self.drop_remainder = check_bool("drop_remainder", drop_remainder)
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self._scale = 2.0 / (high - low)
        self._offset = -1.0 - low * self._scale
        self._epoch = 0
        self._order = self._make_order()

    def _make_order(self):
        if not self.shuffle:
            return np.arange(len(self.images))
        return np.random.default_rng([self.seed, self._epoch]).permutation(
            len(self.images)
        )

    def __len__(self):
        rounding = math.floor if self.drop_remainder else math.ceil
        return rounding(len(self.images) / self.batch_size)

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"Batch index {index} out of range [0, {len(self)}).")
        rows = self._order[index * self.batch_size : (index + 1) * self.batch_size]
        images = self.images[rows].astype(np.float32) * self._scale + self._offset
        images = np.clip(images, -1.0, 1.0)
        if self.flip:
            rng = np.random.default_rng([self.seed, self._epoch, index, 1])
            mask = rng.random(len(rows)) < 0.5
            images[mask] = images[mask, :, ::-1]
        if self.labels is None:
            return images
        return images, self.labels[rows]

    def on_epoch_end(self):
        self._epoch += 1
        self._order = self._make_order()
