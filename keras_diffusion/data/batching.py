"""What every loader's batches share: the checked batching arguments, and the
one map that scales a batch to [-1, 1] and flips it on a seeded coin.

`pipeline` (the in-memory pipelines, `from_arrays`) and `ordered` (the
epoch-ordered batches) both build on this module; it imports neither.
"""

import typing

import tensorflow as tf

from keras_diffusion.utils.checks import check_bool, check_int, check_seed


class Batching(typing.NamedTuple):
    """A loader's batching arguments, checked (see `check_batching`)."""

    batch_size: int
    seed: int | None
    shuffle: bool
    flip: bool
    drop_remainder: bool
    shuffle_buffer_size: int | None = None


def check_shuffle_buffer_size(size):
    if size is not None:
        check_int("shuffle_buffer_size", size, minimum=1)
    return size


def check_batching(
    batch_size, seed, shuffle, flip, drop_remainder, shuffle_buffer_size=None
):
    """Checks the batching arguments a loader takes, in this order; returns
    them as a `Batching`, which unpacks into `from_arrays` keywords."""
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_seed(seed)
    for name, value in (
        ("shuffle", shuffle),
        ("flip", flip),
        ("drop_remainder", drop_remainder),
    ):
        check_bool(name, value)
    check_shuffle_buffer_size(shuffle_buffer_size)
    return Batching(
        batch_size, seed, shuffle, flip, drop_remainder, shuffle_buffer_size
    )


def scale_batches(dataset, *, value_range, flip, seed, image_size=None):
    """Batches of `value_range` values (or `(images, labels)`) to float32 in
    [-1, 1], resized to `image_size` when given, randomly flipped when `flip`.

    One vectorised map a batch, run with `num_parallel_calls=AUTOTUNE`; the
    flips are stateless, seeded by one int64 a batch from `seed`.
    """
    if flip:
        # One int64 a batch: the stateless flip mask stays reproducible under a
        # parallel map, and differs between epochs.
        flip_seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        dataset = tf.data.Dataset.zip(dataset, flip_seeds)
    return scale_seeded_batches(
        dataset, value_range=value_range, flip=flip, image_size=image_size
    )


def condition(labels):
    """A batch's labels as int32, or its captions (`tf.string`) as they are."""
    return labels if labels.dtype == tf.string else tf.cast(labels, tf.int32)


def seeded_flips(images, flip_seed, start=0, size=None):
    """`images` (a batch) with each one flipped left-right on a coin of the
    stateless draw `flip_seed`: one coin per image of a batch of `size`
    (default: this batch), image `i` taking coin `start + i`, so that a
    slice of a batch gets the flips its images get in the whole batch."""
    count = tf.shape(images, out_type=tf.int64)[0]
    size = count if size is None else size
    coins = tf.random.stateless_uniform(
        tf.reshape(size, [1]), seed=tf.stack([flip_seed, tf.constant(0, tf.int64)])
    )
    mask = tf.reshape(coins[start : start + count] < 0.5, [-1, 1, 1, 1])
    return tf.where(mask, tf.reverse(images, axis=[2]), images)


def scale_seeded_batches(dataset, *, value_range, flip, image_size=None):
    """`scale_batches` of a dataset that yields `(batch, flip_seed)` pairs
    when `flip` (an int64 seed a batch), and batches otherwise."""
    low, high = value_range
    scale = 2.0 / (high - low)
    offset = -1.0 - low * scale

    def transform(element, flip_seed=None):
        images, labels = element if isinstance(element, tuple) else (element, None)
        images = tf.cast(images, tf.float32)
        if image_size is not None and tuple(images.shape[1:3]) != image_size:
            images = tf.image.resize(images, image_size, antialias=True)
        # Clip: float rounding may step just outside [-1, 1].
        images = tf.clip_by_value(images * scale + offset, -1.0, 1.0)
        if flip_seed is not None:
            images = seeded_flips(images, flip_seed)
        return images if labels is None else (images, condition(labels))

    if flip:
        return dataset.map(
            lambda element, s: transform(element, s),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    # tf.data passes the parts of a tuple element as separate arguments.
    return dataset.map(
        lambda *element: transform(element if len(element) > 1 else element[0]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
