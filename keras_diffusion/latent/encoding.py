"""Encode a data set once into posterior moments; serve them to `fit`.

Encoding runs the VAE's encoder (tens of millions of parameters) over every
image once, not on every training step. What is kept is the posterior's
moments `concatenate([mean, logvar], axis=-1)`, not one sample of it: a
`DiffusionModel` with the autoencoder draws a fresh sample from them on the
device in each training step.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_diffusion.data import ordered
from keras_diffusion.data.batching import Batching
from keras_diffusion.utils import files
from keras_diffusion.utils.checks import check_int, check_seed


def _condition(values):
    """A batch's labels as int32, or its captions (`tf.string`, read as
    bytes) as str."""
    values = np.asarray(values)
    if values.dtype.kind not in "OSU":
        return values.astype(np.int32)
    texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]
    return np.array(texts, dtype=str)


def _batches(images, batch_size):
    """Batches of `images` (an array or a batched tf.data.Dataset)."""
    if isinstance(images, tf.data.Dataset):
        return images, int(images.cardinality())
    array = np.asarray(images)
    if array.ndim != 4 or not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            "Argument `images` must be floats (n, height, width, 3) in [-1, 1] "
            "or a batched tf.data.Dataset. Received: images of shape "
            f"{array.shape} and dtype {array.dtype}"
        )
    dataset = tf.data.Dataset.from_tensor_slices(array).batch(batch_size)
    return dataset, int(dataset.cardinality())


def _load_cache(cache, latent_shape):
    with np.load(cache) as stored:
        moments = stored["moments"]
        labels = stored["labels"] if "labels" in stored.files else None
    expected = tuple(latent_shape[:2]) + (2 * latent_shape[2],)
    if moments.shape[1:] != expected:
        raise ValueError(
            f"Argument `cache`: {cache!r} holds moments of shape "
            f"{moments.shape[1:]}, not {expected} of this autoencoder; delete "
            f"it or pass another file. Received: cache={cache!r}"
        )
    return moments, labels


def encode_dataset(autoencoder, images, cache=None, batch_size=8, verbose="auto"):
    """Encodes images once into the moments of the VAE's posterior.

    Args:
        autoencoder: a `StableDiffusionAutoencoder`.
        images: float array `(n, height, width, 3)` in [-1, 1], or a batched
            `tf.data.Dataset` of such images or of `(images, labels)` (labels
            class ids, or captions), as `keras_diffusion.data` makes (one
            pass is encoded).
        cache: optional path of a `.npz` file. When it exists, its moments are
            returned without encoding; otherwise they are written there.
            Defaults to `None` (memory only).
        batch_size: int, images per encoder call when `images` is an array.
            Defaults to `8`.
        verbose: `"auto"`, 0 or 1: show a progress bar. Defaults to `"auto"`.

    Returns:
        `(moments, labels)`: float32 NumPy `(n, h, w, 8)` (the mean, then the
        log-variance, unscaled), and int32 labels `(n,)`, the captions (str
        `(n,)`, kept as they are for the model to tokenize) or `None`. A
        cache keeps either under `labels`.
    """
    check_int("batch_size", batch_size, minimum=1)
    if cache is not None:
        cache = os.fspath(cache)
        if not cache.endswith(".npz"):
            raise ValueError(
                f"Argument `cache` must be a .npz path. Received: cache={cache!r}"
            )
        if os.path.isfile(cache):
            return _load_cache(cache, autoencoder.latent_shape)
    dataset, num_batches = _batches(images, batch_size)

    @tf.function(reduce_retracing=True)
    def moments_of(batch):
        mean, logvar = autoencoder.encode_moments(batch)
        return tf.concat([mean, logvar], axis=-1)

    progress = None
    if verbose == 1 or (verbose == "auto" and num_batches != 1):
        progress = keras.utils.Progbar(
            num_batches if num_batches > 0 else None, unit_name="batch"
        )
    moments, labels = [], []
    for element in dataset:
        batch = element[0] if isinstance(element, tuple) else element
        if isinstance(element, tuple):
            labels.append(_condition(element[1]))
        moments.append(moments_of(tf.cast(batch, "float32")).numpy())
        if progress is not None:
            progress.add(1)
    if not moments:
        raise ValueError("Argument `images` is empty: nothing to encode.")
    moments = np.concatenate(moments).astype(np.float32)
    labels = np.concatenate(labels) if labels else None
    if cache is not None:
        arrays = {"moments": moments}
        if labels is not None:
            arrays["labels"] = labels
        with files.atomic_write(cache, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
    return moments, labels


def latent_dataset(moments, batch_size, labels=None, shuffle=True, seed=None):
    """A `tf.data.Dataset` of moment batches (or `(moments, labels)`) for `fit`.

    The moments stay in memory (as a tensor); each epoch is reshuffled. The
    dataset has the `epoch_batches(order, skip=0)` of
    `keras_diffusion.data.ordered`: the same batches in an order that is a
    function of `(seed, epoch)`, so a run resumed in the middle of an epoch
    (`scripts/train.py --latent ...`) continues it where it stopped.

    Args:
        moments: float32 array `(n, h, w, 8)` from `encode_dataset`.
        batch_size: int >= 1.
        labels: optional int array `(n,)`, or captions (str `(n,)`: the
            batches are then `(moments, captions)`, a text model's
            `tf.string` captions). Defaults to `None`.
        shuffle: bool. Defaults to `True`.
        seed: optional int, the shuffle's seed. Defaults to `None`.
    """
    check_int("batch_size", batch_size, minimum=1)
    check_seed(seed)
    moments = np.asarray(moments, np.float32)
    elements = moments if labels is None else (moments, _condition(labels))
    dataset = tf.data.Dataset.from_tensor_slices(elements)
    if shuffle:
        dataset = dataset.shuffle(
            len(moments), seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    batching = Batching(batch_size, seed, shuffle, flip=False, drop_remainder=False)
    return ordered.attach(
        dataset,
        len(moments),
        ordered.array_gather(moments, labels),
        batching,
        value_range=None,  # moments, not pixels: nothing to scale
    )
