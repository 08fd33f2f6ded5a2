"""The in-memory `tf.data` pipeline, its argument checks, and `from_arrays`.

Every in-memory loader ends in `build_pipeline`: optional `cache()`, a seeded
`shuffle`, `batch`, one vectorised map over each batch (cast to float32,
optional resize, scale to [-1, 1], optional seeded random horizontal flip:
`keras_diffusion.data.batching.scale_batches`) run with
`num_parallel_calls=AUTOTUNE`, then `prefetch(AUTOTUNE)`. Scaling after
batching keeps the cache and the shuffle buffer at the source dtype (uint8
arrays stay uint8) and runs one op per batch rather than one per image.
"""

import numbers

import numpy as np
import tensorflow as tf

from keras_diffusion.data import ordered
from keras_diffusion.data.batching import check_batching, scale_batches


def check_image_size(image_size, allow_none=True):
    """Returns `image_size` as an `(height, width)` tuple of ints, or None."""
    if image_size is None and allow_none:
        return None
    size = (
        (image_size, image_size)
        if isinstance(image_size, numbers.Integral)
        else image_size
    )
    if (
        isinstance(size, (tuple, list))
        and len(size) == 2
        and all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
        )
        and all(s >= 1 for s in size)
    ):
        return int(size[0]), int(size[1])
    raise ValueError(
        "Argument `image_size` must be a positive int or a (height, width) "
        f"pair of positive ints. Received: image_size={image_size!r}"
    )


def check_cache(cache):
    if not isinstance(cache, (bool, str)):
        raise TypeError(
            "Argument `cache` must be a bool or a file name (str). "
            f"Received: cache={cache!r}"
        )
    return cache


def check_value_range(value_range):
    ok = isinstance(value_range, (tuple, list)) and len(value_range) == 2
    ok = ok and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value_range
    )
    if not ok or not value_range[0] < value_range[1]:
        raise ValueError(
            "Argument `value_range` must be a pair (low, high) of numbers with "
            f"low < high. Received: value_range={value_range!r}"
        )
    return float(value_range[0]), float(value_range[1])


def check_images(images):
    """Returns `images` as a NumPy NHWC array; (N, H, W) gains a channel axis."""
    try:
        images = np.asarray(images)
    except (TypeError, ValueError) as error:
        raise ValueError(
            "Argument `images` must be an array (N, H, W) or (N, H, W, C). "
            f"Received: images of type {type(images).__name__} ({error})"
        ) from error
    if images.dtype == bool or not (
        np.issubdtype(images.dtype, np.integer)
        or np.issubdtype(images.dtype, np.floating)
    ):
        raise TypeError(
            "Argument `images` must hold integers or floats. "
            f"Received: images with dtype={images.dtype}"
        )
    if images.ndim not in (3, 4):
        raise ValueError(
            "Argument `images` must have shape (N, H, W) or (N, H, W, C), "
            f"channels last. Received: images with shape={images.shape}"
        )
    if min(images.shape) == 0:
        raise ValueError(
            "Argument `images` must not be empty. "
            f"Received: images with shape={images.shape}"
        )
    if images.ndim == 3:
        images = images[..., None]
    if images.shape[-1] > 4:
        raise ValueError(
            "Argument `images` must be channels last with 1 to 4 channels. "
            f"Received: images with shape={images.shape}"
        )
    return images


def infer_value_range(images, value_range):
    """Returns the checked `value_range`, inferred from the data when None.

    uint8 is (0, 255); floats within [0, 1] are (0, 1); floats within [-1, 1]
    with negatives are (-1, 1). Anything else must be stated.
    """
    low, high = float(np.min(images)), float(np.max(images))
    if value_range is None:
        if images.dtype == np.uint8:
            return 0.0, 255.0
        if np.issubdtype(images.dtype, np.floating) and -1.0 <= low and high <= 1.0:
            return (0.0, 1.0) if low >= 0.0 else (-1.0, 1.0)
        raise ValueError(
            "Argument `value_range` is required for images that are not uint8 "
            "or floats within [-1, 1]. Received: value_range=None for images "
            f"with dtype={images.dtype}, min={low:g}, max={high:g}"
        )
    value_range = check_value_range(value_range)
    if low < value_range[0] or high > value_range[1]:
        raise ValueError(
            "Argument `value_range` must contain the values of `images`, which "
            f"span [{low:g}, {high:g}]. Received: value_range={value_range!r}"
        )
    return value_range


def is_text(labels):
    """Whether `labels` (a list or array) holds strings: captions."""
    array = np.asarray(labels, dtype=object) if isinstance(labels, list) else labels
    array = np.asarray(array)
    if array.dtype.kind in "US":
        return True
    return (
        array.dtype == object
        and array.size > 0
        and any(isinstance(v, (str, bytes)) for v in array.ravel())
    )


def check_captions(captions, num_images):
    """Returns `captions` as a list of `num_images` str."""
    array = np.asarray(captions, dtype=object)
    if array.ndim != 1 or len(array) != num_images:
        raise ValueError(
            f"Argument `labels` (captions) must have shape ({num_images},), one "
            f"per image. Received: captions with shape={array.shape}"
        )
    values = [v.decode() if isinstance(v, bytes) else v for v in array.tolist()]
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(
                "Argument `labels` (captions) must hold only strings. Received: "
                f"labels[{index}]={value!r} ({type(value).__name__})"
            )
    return values


def check_labels(labels, num_images):
    """Returns `labels` as an int32 vector of length `num_images`."""
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]  # keras' cifar10 labels are (N, 1)
    if labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(
            "Argument `labels` must hold integer class ids. "
            f"Received: labels with dtype={labels.dtype}"
        )
    if labels.ndim != 1 or len(labels) != num_images:
        raise ValueError(
            f"Argument `labels` must have shape ({num_images},), one per image. "
            f"Received: labels with shape={labels.shape}"
        )
    if labels.min() < 0:
        raise ValueError(
            "Argument `labels` must be non-negative class ids. "
            f"Received: labels with min={labels.min()}"
        )
    return labels.astype(np.int32)


def build_pipeline(
    dataset,
    batching,
    *,
    num_examples,
    value_range,
    cache,
    image_size=None,
    autotune=True,
):
    """Cache, shuffle, batch, scale (+ resize, flip) and prefetch `dataset`.

    `dataset` yields single images (H, W, C) of any real dtype with values in
    `value_range`, or `(image, label)` pairs; `batching` is a checked
    `keras_diffusion.data.batching.Batching`. Returns batches of float32
    images in [-1, 1] (and int32 labels), with a `num_examples` attribute.
    `autotune=False` turns tf.data's autotuning
    thread off: for data already in memory it has nothing to tune, and on a
    small CPU its periodic work and its end-of-epoch shutdown cost ~10 % of an
    epoch of the digits run (docs/benchmarks.md).
    """
    if cache:
        dataset = dataset.cache() if cache is True else dataset.cache(cache)
    if batching.shuffle:
        buffer = batching.shuffle_buffer_size or num_examples
        dataset = dataset.shuffle(
            buffer, seed=batching.seed, reshuffle_each_iteration=True
        )
    dataset = dataset.batch(batching.batch_size, drop_remainder=batching.drop_remainder)
    dataset = scale_batches(
        dataset,
        value_range=value_range,
        flip=batching.flip,
        seed=batching.seed,
        image_size=image_size,
    )
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    if not autotune:
        dataset = without_autotune(dataset)
    dataset.num_examples = num_examples
    return dataset


def without_autotune(dataset):
    """`dataset` with tf.data's autotuning off, unless its options set it.

    Python attributes of `dataset` (`num_examples`, `class_names` of the
    `keras_diffusion.data` pipelines) are carried over.
    """
    if dataset.options().autotune.enabled is not None:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    tuned = dataset.with_options(options)
    for name in ("num_examples", "class_names"):
        if hasattr(dataset, name):
            setattr(tuned, name, getattr(dataset, name))
    return tuned


def from_arrays(
    images,
    labels=None,
    batch_size=32,
    *,
    value_range=None,
    image_size=None,
    shuffle=True,
    flip=False,
    seed=None,
    cache=False,
    drop_remainder=False,
    shuffle_buffer_size=None,
):
    """Builds a `tf.data.Dataset` of batches scaled to [-1, 1] from NumPy arrays.

    Args:
        images: array of shape `(N, H, W)` (grayscale; a channel axis is added)
            or `(N, H, W, C)`, channels last.
        labels: optional integer class ids of shape `(N,)` (or `(N, 1)`), or
            captions: `N` strings (a list or a str array), one per image.
            When given, the dataset yields `(images, labels)` with int32
            labels, or `(images, captions)` with `tf.string` captions
            `(batch,)`, shuffled with their images. Defaults to `None`.
        batch_size: int, images a batch. Defaults to `32`.
        value_range: `(low, high)` the pixel values span, mapped to
            `(-1, 1)`. `None` infers it: `(0, 255)` for uint8, `(0, 1)` for
            floats within [0, 1], `(-1, 1)` for floats within [-1, 1] with
            negatives; other data raises `ValueError`. Defaults to `None`.
        image_size: int or `(height, width)` to resize to (bilinear,
            antialiased, on each batch), or `None` to keep the size.
            Defaults to `None`.
        shuffle: bool, reshuffle every epoch. Defaults to `True`.
        flip: bool, flip each image left-right with probability 1/2.
            Defaults to `False`.
        seed: int or `None`, seeds the shuffle and the flips; the same seed
            gives the same batches. Defaults to `None`.
        cache: bool or a file name for `Dataset.cache`. The arrays are already
            in memory, so this only helps with a file name. Defaults to `False`.
        drop_remainder: bool, drop a last batch smaller than `batch_size`.
            Defaults to `False`.
        shuffle_buffer_size: int or `None` for the whole data set.
            Defaults to `None`.

    Returns:
        A `tf.data.Dataset` of float32 NHWC batches in [-1, 1], or
        `(images, labels)` pairs. Its `class_names` attribute is `None`; its
        `captions` attribute lists the captions (or is `None`).

    Example:

    ```python
    x = np.random.randint(0, 256, (100, 16, 16), dtype="uint8")
    ds = from_arrays(x, batch_size=8, seed=0)
    next(iter(ds)).shape  # TensorShape([8, 16, 16, 1])
    ds = from_arrays(x[:2], ["cat face", "red heart"], batch_size=2)
    images, captions = next(iter(ds))  # captions: tf.string, shape (2,)
    ```
    """
    batching = check_batching(
        batch_size, seed, shuffle, flip, drop_remainder, shuffle_buffer_size
    )
    image_size = check_image_size(image_size)
    cache = check_cache(cache)
    images = check_images(images)
    value_range = infer_value_range(images, value_range)
    captions = None
    if labels is not None and is_text(labels):
        labels = captions = check_captions(labels, len(images))
    elif labels is not None:
        labels = check_labels(labels, len(images))
    dataset = _array_pipeline(images, labels, batching, value_range, image_size, cache)
    dataset.captions = captions
    return dataset


def _array_pipeline(images, labels, batching, value_range, image_size, cache):
    """`from_arrays` of checked arguments."""
    if not np.issubdtype(images.dtype, np.floating) and images.dtype != np.uint8:
        images = images.astype(np.float32)
    # One copy in TensorFlow, shared by the dataset and `epoch_batches`.
    images = tf.constant(images)
    if labels is not None:
        texts = isinstance(labels, list)
        labels = tf.constant(labels, tf.string if texts else tf.int32)
    source = images if labels is None else (images, labels)
    dataset = build_pipeline(
        tf.data.Dataset.from_tensor_slices(source),
        batching,
        num_examples=int(images.shape[0]),
        value_range=value_range,
        cache=cache,
        image_size=image_size,
        autotune=False,
    )
    dataset.class_names = None
    return ordered.attach(
        dataset,
        int(images.shape[0]),
        ordered.array_gather(images, labels),
        batching,
        value_range=value_range,
        image_size=image_size,
    )
