"""`keras.datasets` (mnist, fashion_mnist, cifar10) as pipelines in [-1, 1].

A local copy serves where keras' download cannot (`path=`, the run's
`--data-path`): an `.npz` in the layout of keras' `mnist.npz` (arrays
`x_train`, `y_train`, `x_test`, `y_test`), or a folder of the four idx
files of the original MNIST or Fashion-MNIST download
(`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`, `t10k-...`, each
also gzipped).
"""

import gzip
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
# The layout `path=` reads, as errors name it.
LAYOUT = (
    "an .npz with arrays x_train, y_train, x_test, y_test (the layout of "
    "keras' mnist.npz), or a folder of the four idx files of the MNIST "
    "download (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte; .gz or not)"
)
# The idx files of each split: (images, labels), as the MNIST download names them.
IDX_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# idx's type codes (its third magic byte) the digits' files use.
_IDX_DTYPES = {0x08: np.uint8}


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
        f"(no network? {error}). Either pass `path=` a local "
        f"copy, {LAYOUT}, or download on a machine with a network and place "
        f"the file(s): {places}"
    )


def _idx_path(folder, stem):
    """The idx file `stem` in `folder`, gzipped or not, or `None`."""
    for name in (stem, stem + ".gz"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def read_idx(path):
    """The array of one idx file (`.gz` or not): uint8 `(n, ...)`.

    Raises:
        ValueError: naming `path`, when it is not an idx file of bytes.
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_DTYPES:
        raise ValueError(f"{path!r} is not an idx file of bytes (MNIST's format)")
    ndim = data[3]
    shape = tuple(
        int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)
    )
    body = np.frombuffer(data, _IDX_DTYPES[data[2]], offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(
            f"{path!r} holds {body.size} values where its header says {shape}"
        )
    return body.reshape(shape)


def source_problem(path):
    """What is wrong with `path` as a local copy (`LAYOUT`), in words, or
    `None` when it has that layout. Reads the names it holds, not its
    arrays."""
    path = os.fspath(path)
    if os.path.isdir(path):
        missing = [
            stem
            for pair in IDX_FILES.values()
            for stem in pair
            if _idx_path(path, stem) is None
        ]
        if not missing:
            return None
        found = sorted(os.listdir(path))
        shown = ", ".join(found[:5]) + (
            f" and {len(found) - 5} more" if len(found) > 5 else ""
        )
        named = "the idx files" if len(missing) == 4 else ", ".join(missing)
        return f"a folder without {named}; it holds {shown or 'nothing'}"
    if not os.path.exists(path):
        return "which does not exist"
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = sorted(f.files) if hasattr(f, "files") else None
    except Exception:  # noqa: BLE001 - any unreadable file is the same answer
        return "a file that is not an .npz"
    if arrays is None:
        return "a .npy file of one array, not an .npz"
    missing = [a for a in ("x_train", "y_train", "x_test", "y_test") if a not in arrays]
    if missing:
        return f"an .npz without {', '.join(missing)}; it has {arrays}"
    return None


def read_local(path, split):
    """`(images, labels)` of `split` from a local copy of `LAYOUT`."""
    path = os.fspath(path)
    if os.path.isdir(path):
        images, labels = (read_idx(_idx_path(path, stem)) for stem in IDX_FILES[split])
        return images, labels
    with np.load(path, allow_pickle=False) as f:
        return f[f"x_{split}"], f[f"y_{split}"]


def load_keras_arrays(name, split="train", path=None):
    """Loads one split of a `keras.datasets` data set as NumPy arrays.

    Args:
        name: `"mnist"`, `"fashion_mnist"` or `"cifar10"`.
        split: `"train"` or `"test"`. Defaults to `"train"`.
        path: optional local copy read instead of keras' download and
            cache: an `.npz` with arrays `x_train`, `y_train`, `x_test`,
            `y_test`, or a folder of the four idx files (see the module).
            Defaults to `None`.

    Returns:
        `(images, labels)`: uint8 `(N, H, W)` or `(N, H, W, 3)` images and
        their labels, as `keras.datasets.<name>.load_data()` gives them.

    Raises:
        ValueError: `path` is not a local copy of that layout (saying what
            it is), or a bad `name` or `split`.
        DatasetDownloadError: the data set is not cached and the download
            failed; the message says where to put a local copy.
    """
    check_choice("name", name, KERAS_DATASETS)
    check_choice("split", split, SPLITS)
    if path is not None:
        problem = source_problem(path)
        if problem is not None:
            raise ValueError(
                f"Argument `path` must be {LAYOUT}. Received: path={path!r}, {problem}"
            )
        return read_local(path, split)
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
        path: optional local copy instead of keras' cache: an `.npz` with
            arrays `x_train`, `y_train`, `x_test`, `y_test`, or a folder of
            the four idx files (see the module). Defaults to `None`.
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
