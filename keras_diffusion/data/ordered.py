"""Epoch-ordered batches: the data order as a pure function of (seed, epoch).

`tf.data`'s `shuffle(reshuffle_each_iteration=True)` gives epoch `e` the
`e`-th draw of its seed stream, so a process that starts at epoch `e` (a
resumed run) sees another order than an uninterrupted one. Here each epoch's
order is a stateless permutation of the positions
(`tf.random.experimental.index_shuffle`, a full permutation, seeded by
`(seed, epoch)`), the flips are seeded by `(seed, epoch, batch)`, and the
epoch is a variable that `EpochOrder.callback()` sets at each epoch's start.
A resume in the middle of an epoch skips the batches already trained on, as
positions (nothing is read or decoded for them).
"""

import keras
import tensorflow as tf

from keras_diffusion.data import pipeline


class EpochOrder:
    """The seed and the current epoch of epoch-ordered batches.

    Args:
        seed: int or `None` (0).
    """

    def __init__(self, seed):
        self.seed = int(seed or 0)
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")

    def callback(self):
        """A callback that sets the epoch before `fit` reads the epoch's data."""
        return keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda epoch, logs=None: self.epoch.assign(epoch)
        )


def epoch_batches(
    num_examples,
    gather,
    batch_size,
    *,
    order,
    shuffle,
    flip,
    drop_remainder,
    value_range,
    image_size=None,
    skip=0,
):
    """The batches of epoch `order.epoch`, from batch `skip` on.

    Args:
        num_examples: int, the examples.
        gather: a function from an int64 vector of positions to the batch's
            images (or `(images, labels)`), in `value_range`.
        batch_size, shuffle, flip, drop_remainder, value_range, image_size:
            as `keras_diffusion.data.from_arrays`.
        order: `EpochOrder`.
        skip: int, batches of the epoch to leave out at its start.

    Returns:
        A `tf.data.Dataset` of float32 batches in [-1, 1] (or `(images,
        labels)`); its order is read from `order.epoch` when iterated.
    """
    seed = tf.constant(order.seed, tf.int64)
    positions = tf.data.Dataset.range(num_examples)
    if shuffle:

        def permute(i):
            pair = tf.stack([seed, order.epoch.read_value()])
            return tf.random.experimental.index_shuffle(i, pair, num_examples - 1)

        positions = positions.map(permute)
    batches = positions.batch(batch_size, drop_remainder=drop_remainder).enumerate()
    if skip:
        batches = batches.skip(skip)

    def load(index, rows):
        element = gather(rows)
        if not flip:
            return element
        # The batch's flip seed: one stateless draw per (seed, epoch, batch).
        pair = tf.stack([seed, order.epoch.read_value() * 2**31 + index])
        draw = tf.random.stateless_uniform([], pair, maxval=2**62, dtype=tf.int64)
        return element, draw

    batches = batches.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return pipeline.scale_seeded_batches(
        batches, value_range=value_range, flip=flip, image_size=image_size
    ).prefetch(tf.data.AUTOTUNE)


def array_gather(images, labels=None):
    """A `gather` of `epoch_batches` over in-memory arrays or tensors."""
    images = tf.convert_to_tensor(images)
    labels = None if labels is None else tf.cast(labels, tf.int32)

    def gather(rows):
        if labels is None:
            return tf.gather(images, rows)
        return tf.gather(images, rows), tf.gather(labels, rows)

    return gather


def attach(dataset, num_examples, gather, batch_size, **kwargs):
    """Gives `dataset` an `epoch_batches(order, skip=0)` method: the same
    data, batched and scaled alike, in the epoch order of `order`."""

    def batches_of(order, skip=0):
        return epoch_batches(
            num_examples, gather, batch_size, order=order, skip=skip, **kwargs
        )

    dataset.epoch_batches = batches_of
    return dataset
