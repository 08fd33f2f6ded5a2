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

from keras_diffusion.data.batching import (
    condition,
    scale_seeded_batches,
    seeded_flips,
)


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
    batching,
    *,
    order,
    value_range,
    image_size=None,
    skip=0,
    replicas=None,
):
    """The batches of epoch `order.epoch`, from batch `skip` on.

    Args:
        num_examples: int, the examples.
        gather: a function from an int64 vector of positions to the batch's
            images (or `(images, labels)`), in `value_range`.
        batching: `keras_diffusion.data.batching.Batching`: the batch size,
            shuffle, flip and drop_remainder (its seed is not used: the
            order's is).
        value_range, image_size: as `keras_diffusion.data.from_arrays`;
            `value_range=None` passes the values through unscaled (latent
            moments).
        order: `EpochOrder`.
        skip: int, batches of the epoch to leave out at its start.
        replicas: `None`, or `(num_replicas, first, count)`: for each global
            batch, the slices of replicas `first` to `first + count - 1`
            only, each as a batch of its own (`replica_slices`), and only
            their rows are read. Every slice is what those replicas get of
            the global batch, flips included.

    Returns:
        A `tf.data.Dataset` of float32 batches in [-1, 1] (or `(images,
        labels)`); its order is read from `order.epoch` when iterated.
    """
    seed = tf.constant(order.seed, tf.int64)
    positions = tf.data.Dataset.range(num_examples)
    if batching.shuffle:

        def permute(i):
            pair = tf.stack([seed, order.epoch.read_value()])
            return tf.random.experimental.index_shuffle(i, pair, num_examples - 1)

        positions = positions.map(permute)
    batches = positions.batch(
        batching.batch_size, drop_remainder=batching.drop_remainder
    ).enumerate()
    if skip:
        batches = batches.skip(skip)
    # Each element: (batch index, rows, where the rows start in the global
    # batch, the global batch's size).
    if replicas is None:
        batches = batches.map(
            lambda index, rows: (
                index,
                rows,
                tf.constant(0, tf.int64),
                tf.size(rows, tf.int64),
            )
        )
    else:
        # flat_map forgets the length; Keras needs it to end an epoch
        # without an extra empty step.
        slices = int(batches.cardinality()) * replicas[2]
        batches = batches.flat_map(
            lambda index, rows: replica_slices(index, rows, *replicas)
        ).apply(tf.data.experimental.assert_cardinality(slices))

    def load(index, rows, start, size):
        element = gather(rows)
        if not batching.flip:
            return element
        images, labels = element if isinstance(element, tuple) else (element, None)
        # The batch's flip seed: one stateless draw per (seed, epoch, batch),
        # then a coin per image of the global batch, sliced like the rows.
        pair = tf.stack([seed, order.epoch.read_value() * 2**31 + index])
        draw = tf.random.stateless_uniform([], pair, maxval=2**62, dtype=tf.int64)
        images = seeded_flips(images, draw, start, size)
        return images if labels is None else (images, labels)

    batches = batches.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    if value_range is None:
        return batches.prefetch(tf.data.AUTOTUNE)
    return scale_seeded_batches(
        batches, value_range=value_range, flip=False, image_size=image_size
    ).prefetch(tf.data.AUTOTUNE)


def replica_slices(index, rows, num_replicas, first, count):
    """The slices of replicas `first`..`first + count - 1` of one global
    batch, as a dataset of `(index, rows, start, size)`.

    A batch of `n` rows gives each replica `n // num_replicas`, and one more
    to the first `n % num_replicas` (5 on 2: 3 and 2; 1 on 2: 1 and 0).
    """
    size = tf.size(rows, tf.int64)
    ids = tf.range(first, first + count, dtype=tf.int64)
    share, extra = size // num_replicas, size % num_replicas
    starts = ids * share + tf.minimum(ids, extra)
    ends = starts + share + tf.cast(ids < extra, tf.int64)
    return tf.data.Dataset.from_tensor_slices((starts, ends)).map(
        lambda start, end: (index, rows[start:end], start, size)
    )


def array_gather(images, labels=None):
    """A `gather` of `epoch_batches` over in-memory arrays or tensors;
    `labels` class ids, or captions (str)."""
    images = tf.convert_to_tensor(images)
    labels = None if labels is None else condition(tf.convert_to_tensor(labels))

    def gather(rows):
        if labels is None:
            return tf.gather(images, rows)
        return tf.gather(images, rows), tf.gather(labels, rows)

    return gather


def attach(dataset, num_examples, gather, batching, *, value_range, image_size=None):
    """Gives `dataset` an `epoch_batches(order, skip=0)` method: the same
    data, batched and scaled alike, in the epoch order of `order`.

    `batching`, `value_range` and `image_size` are those `dataset` was built
    with (see `epoch_batches`).

    The batches it returns have a `replica_batches(num_replicas, first,
    count)` method: the same epoch, cut into those replicas' slices (see
    `epoch_batches`). `DiffusionModel.fit` uses it under a multi-worker
    strategy, so that each worker reads its own share of every batch.
    """

    def batches_of(order, skip=0):
        def build(replicas=None):
            return epoch_batches(
                num_examples,
                gather,
                batching,
                order=order,
                value_range=value_range,
                image_size=image_size,
                skip=skip,
                replicas=replicas,
            )

        batches = build()
        batches.replica_batches = lambda *replicas: build(replicas)
        return batches

    dataset.epoch_batches = batches_of
    return dataset
