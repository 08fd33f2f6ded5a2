"""`keras.datasets` (mnist, fashion_mnist, cifar10) as pipelines in [-1, 1]."""

import os

import keras
import numpy as np

from keras_diffusion.data import pipeline
from keras_diffusion.data.batching import check_batching
from keras_diffusion.utils.checks import check_choice

_BASE = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
_FASHION = (
    "train-labels-idx1-ubyte.gz",
    "train-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
)
# name -> (the file(s) keras downloads, where keras' cache keeps them, class names)
KERAS_DATASETS = {
    "mnist": (
        [_BASE + "mnist.npz"],
        ["mnist.npz"],
        [str(i) for i in range(10)],
    ),
    "fashion_mnist": (
        [_BASE + f for f in _FASHION],
        [os.path.join("fashion-mnist", f) for f in _FASHION],
        ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat"]
        + ["Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"],
    ),
    "cifar10": (
        ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"],
        ["cifar-10-batches-py-target_archive"],
        ["airplane", "automobile", "bird", "cat", "deer"]
        + ["dog", "frog", "horse", "ship", "truck"],
    ),
}
SPLITS = ("train", "test")


class DatasetDownloadError(RuntimeError):
    """A `keras.datasets` data set is not cached and could not be downloaded."""


def _download_help(name, error):
    origins, cached, _ = KERAS_DATASETS[name]
    home = os.environ.get("KERAS_HOME") or os.path.join("~", ".keras")
    places = "; ".join(
        f"{origin} -> {os.path.join(home, 'datasets', target)}"
        for origin, target in zip(origins, cached, strict=True)
    )
    return (
        f"Data set {name!r} is not in keras' cache and downloading it failed "
        f"(no network? {error}). Either pass `path=` a local .npz file with arrays "
        "x_train, y_train, x_test, y_test (the layout of keras' mnist.npz), or "
        f"download on a machine with a network and place the file(s): {places}"
    )


def load_keras_arrays(name, split="train", path=None):
    """Loads one split of a `keras.datasets` data set as NumPy arrays.

    Args:
        name: `"mnist"`, `"fashion_mnist"` or `"cifar10"`.
        split: `"train"` or `"test"`. Defaults to `"train"`.
        path: optional local `.npz` with arrays `x_train`, `y_train`,
            `x_test`, `y_test`, read instead of keras' download and cache.
            Defaults to `None`.

    Returns:
        `(images, labels)`: uint8 `(N, H, W)` or `(N, H, W, 3)` images and
        their labels, as `keras.datasets.<name>.load_data()` gives them.

    Raises:
        DatasetDownloadError: the data set is not cached and the download
            failed; the message says where to put a local copy.
    """
    check_choice("name", name, KERAS_DATASETS)
    check_choice("split", split, SPLITS)
    if path is not None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(
                "Argument `path` must be an existing .npz file. "
                f"Received: path={path!r}"
            )
        with np.load(path, allow_pickle=False) as f:
            missing = {f"x_{split}", f"y_{split}"} - set(f.files)
            if missing:
                raise ValueError(
                    f"Argument `path` must name a .npz with arrays x_{split} and "
                    f"y_{split}; it has {sorted(f.files)}. Received: path={path!r}"
                )
            return f[f"x_{split}"], f[f"y_{split}"]
    try:
        train, test = getattr(keras.datasets, name).load_data()
    except Exception as error:
        # keras' get_file turns URLError/HTTPError into a bare Exception.
        if isinstance(error, OSError) or "URL fetch failure" in str(error):
            raise DatasetDownloadError(_download_help(name, error)) from error
        raise
    return train if split == "train" else test


def from_keras_dataset(
    name,
    batch_size=32,
    *,
    split="train",
    image_size=None,
    with_labels=False,
    path=None,
    shuffle=True,
    flip=False,
    seed=None,
    cache=False,
    drop_remainder=False,
):
    """Builds a `tf.data.Dataset` in [-1, 1] from `keras.datasets`.

    Uses the real `keras.datasets.<name>.load_data()`, which reads keras'
    cache (`$KERAS_HOME/datasets`, by default `~/.keras/datasets`) and
    downloads on a miss. Without a network and without a cached copy it
    raises `DatasetDownloadError` (a `RuntimeError`) that says which file to
    place where, or to pass `path=` a local `.npz`.

    Args:
        name: `"mnist"`, `"fashion_mnist"` or `"cifar10"`.
        batch_size: int, images a batch. Defaults to `32`.
        split: `"train"` or `"test"`. Defaults to `"train"`.
        image_size: int or `(height, width)` to resize to (bilinear), e.g.
            `32` for mnist's 28x28, or `None` for the native size.
            Defaults to `None`.
        with_labels: bool, yield `(images, labels)`. Defaults to `False`.
        path: optional local `.npz` with arrays `x_train`, `y_train`,
            `x_test`, `y_test` instead of keras' cache. Defaults to `None`.
        shuffle: bool, reshuffle every epoch. Defaults to `True`.
        flip: bool, random horizontal flips. Defaults to `False`.
        seed: int or `None`, seeds the shuffle and the flips.
            Defaults to `None`.
        cache: bool or a file name for `Dataset.cache`. Defaults to `False`.
        drop_remainder: bool, drop a last partial batch. Defaults to `False`.

    Returns:
        A `tf.data.Dataset` of float32 NHWC batches in [-1, 1], or
        `(images, labels)`; its `class_names` attribute lists the classes.
    """
    check_choice("name", name, KERAS_DATASETS)
    check_choice("split", split, SPLITS)
    # Checked before a download, which is slow and may fail for its own
    # reasons; `from_arrays` checks them again, with the images.
    batching = check_batching(batch_size, seed, shuffle, flip, drop_remainder)
    pipeline.check_image_size(image_size)
    pipeline.check_cache(cache)
    images, labels = load_keras_arrays(name, split, path)
    dataset = pipeline.from_arrays(
        images,
        labels if with_labels else None,
        value_range=(0, 255),
        image_size=image_size,
        cache=cache,
        **batching._asdict(),
    )
    dataset.class_names = list(KERAS_DATASETS[name][2])
    return dataset
