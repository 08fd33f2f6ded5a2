"""The embedded handwritten digits: 1,797 8x8 digits shipped with the package."""

import os

import numpy as np
import tensorflow as tf

from keras_diffusion.data import pipeline

DIGITS_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "digits.npz"
)
DIGITS_CLASS_NAMES = [str(i) for i in range(10)]


def load_digits_arrays(image_size=16):
    """Returns the embedded digits as float32 arrays in [-1, 1].

    The 1,797 8x8 digits that ship with scikit-learn (values 0..16; UCI,
    CC BY 4.0, see `keras_diffusion/assets/README.md`), read from the copy
    inside the package: no network and no scikit-learn needed.

    Args:
        image_size: int or `(height, width)`; the 8x8 digits are resized to it
            (bilinear, which stays within the value range). Defaults to `16`.

    Returns:
        `(images, labels)`: float32 `(1797, height, width, 1)` in [-1, 1] and
        int32 `(1797,)` labels 0..9.
    """
    image_size = pipeline.check_image_size(image_size, allow_none=False)
    with np.load(DIGITS_PATH, allow_pickle=False) as f:
        images, labels = f["images"], f["labels"]
    images = images[..., None].astype(np.float32)
    if image_size != (8, 8):
        images = tf.image.resize(images, image_size, method="bilinear").numpy()
    images = np.clip(images / 8.0 - 1.0, -1.0, 1.0)
    return images, labels.astype(np.int32)


def load_digits(
    batch_size=32,
    *,
    image_size=16,
    with_labels=False,
    shuffle=True,
    flip=False,
    seed=None,
    drop_remainder=False,
):
    """Builds a `tf.data.Dataset` of the embedded handwritten digits in [-1, 1].

    See `load_digits_arrays` for the data. All 1,797 digits form one split.

    Args:
        batch_size: int, images a batch. Defaults to `32`.
        image_size: int or `(height, width)`. Defaults to `16`.
        with_labels: bool, yield `(images, labels)`. Defaults to `False`.
        shuffle: bool, reshuffle every epoch. Defaults to `True`.
        flip: bool, random horizontal flips (mirrored digits are not digits).
            Defaults to `False`.
        seed: int or `None`, seeds the shuffle and the flips.
            Defaults to `None`.
        drop_remainder: bool, drop a last partial batch. Defaults to `False`.

    Returns:
        A `tf.data.Dataset` of float32 `(batch, 16, 16, 1)` batches, or
        `(images, labels)`; `class_names` is `['0', ..., '9']`.

    Example:

    ```python
    ds = load_digits(batch_size=64, seed=0)
    next(iter(ds)).shape  # TensorShape([64, 16, 16, 1])
    ```
    """
    # `from_arrays` checks the other arguments.
    images, labels = load_digits_arrays(image_size)
    dataset = pipeline.from_arrays(
        images,
        labels if with_labels else None,
        batch_size,
        value_range=(-1, 1),
        shuffle=shuffle,
        flip=flip,
        seed=seed,
        drop_remainder=drop_remainder,
    )
    dataset.class_names = list(DIGITS_CLASS_NAMES)
    return dataset
