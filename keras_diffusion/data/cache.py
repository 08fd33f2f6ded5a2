"""The decode cache: an image folder decoded once to a memory-mapped uint8 file.

`from_directory(..., cache=DIR)` decodes every image once, at the training
size, into `DIR/images.npy` (uint8, `(files, height, width, channels)`),
read afterwards through a memory map: resident memory holds the batches in
flight, not the data set, however large the folder. The epochs shuffle
indices (8 bytes an image, a whole-dataset permutation) and gather each
batch from the map.

`DIR` holds:

- `manifest.json`, written last: the format version, the decode settings
  (`image_size`, `channels`, `background`, `resize`, `class_subfolders`),
  a digest of the file list (relative path, size and mtime of every file),
  the files that could not be decoded, and the byte size `images.npy` must
  have;
- `images.npy`, `index.npy` (the decodable rows) and `labels.npy`;
- while building: `images.npy.partial` and `progress.json` (the rows done),
  so that an interrupted build resumes where it stopped (a kill at any
  point: every other file is written atomically, and what a killed writer
  left is removed when the cache is next opened).

Any difference from the manifest (another setting, an added, removed or
modified file, another format version) rebuilds the cache, with one
`UserWarning` naming what changed. A cache that is partly written or
damaged (no readable manifest, a file of the wrong size) is rebuilt, never
read. A disk that fills while building removes the partial files. The
build itself (interruptible, resumable) is `keras_diffusion.data.cache_build`.
"""

import hashlib
import os
import warnings

import numpy as np
import tensorflow as tf

from keras_diffusion.data import cache_build
from keras_diffusion.data.cache_build import (
    FORMAT_VERSION,
    IMAGES,
    INDEX,
    LABELS,
    MANIFEST,
)
from keras_diffusion.utils import files as files_lib


def file_digest(folder, paths):
    """SHA-256 of each file's path (relative to `folder`), size and mtime."""
    digest = hashlib.sha256()
    for path in paths:
        stat = os.stat(path)
        relative = os.path.relpath(path, folder)
        digest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _describe(settings):
    return {k: v for k, v in settings.items() if k != "files_digest"}


def _changes(saved, current):
    """What differs between two manifests' dependencies, in words."""
    if saved.get("format_version") != current["format_version"] or not isinstance(
        saved.get("settings"), dict
    ):
        return (
            f"format version {saved.get('format_version')!r} -> "
            f"{current['format_version']}"
        )
    parts = [
        f"{k} {saved['settings'].get(k)!r} -> {v!r}"
        for k, v in _describe(current["settings"]).items()
        if saved["settings"].get(k) != v
    ]
    if saved["settings"].get("files_digest") != current["settings"]["files_digest"]:
        parts.append(
            f"the files changed ({saved.get('num_files')} -> "
            f"{current['num_files']}, or a size or mtime)"
        )
    return "; ".join(parts)


class DecodeCache:
    """An open decode cache: the memory-mapped images, their labels, and the
    manifest. Made by `open_or_build`.

    `captions` (one str a file, or `None`) are the folder's, read from its
    metadata each time rather than cached; `self.captions` lists those of the
    decodable rows, which `gather_op` returns beside the images."""

    def __init__(self, folder, manifest, captions=None):
        self.folder = folder
        self.manifest = manifest
        self.images = np.load(os.path.join(folder, IMAGES), mmap_mode="r")
        self.index = np.load(os.path.join(folder, INDEX))
        labels = np.load(os.path.join(folder, LABELS))
        self.labels = labels if manifest["settings"]["class_subfolders"] else None
        self.captions = None
        if captions is not None:
            self.captions = [captions[i] for i in self.index]
            self._caption_table = tf.constant(self.captions, tf.string)

    def __len__(self):
        return len(self.index)

    def gather(self, rows):
        """The images (and labels) of positions `rows` of `index`, read from
        the map in file order and returned in the order asked."""
        rows = np.asarray(rows, np.int64)
        order = np.argsort(rows, kind="stable")
        images = np.empty((len(rows), *self.images.shape[1:]), np.uint8)
        images[order] = self.images[self.index[rows[order]]]
        if self.labels is None:
            return images
        return images, self.labels[rows].astype(np.int32)

    def dataset(self, batch_size, *, shuffle, seed, drop_remainder, buffer=None):
        """Batches of uint8 images (and int32 labels): shuffled positions,
        batched, then one gather from the map a batch."""
        rows = tf.data.Dataset.range(len(self))
        if shuffle:
            rows = rows.shuffle(
                buffer or len(self), seed=seed, reshuffle_each_iteration=True
            )
        rows = rows.batch(batch_size, drop_remainder=drop_remainder)
        return rows.map(self.gather_op, num_parallel_calls=tf.data.AUTOTUNE)

    def gather_op(self, rows):
        """`gather` as a TensorFlow op on a vector of positions."""
        shape = (None, *self.images.shape[1:])
        if self.labels is None:
            images = tf.numpy_function(self.gather, [rows], tf.uint8, stateful=False)
            images.set_shape(shape)
            if self.captions is not None:
                return images, tf.gather(self._caption_table, rows)
            return images
        images, labels = tf.numpy_function(
            self.gather, [rows], (tf.uint8, tf.int32), stateful=False
        )
        images.set_shape(shape)
        labels.set_shape((None,))
        return images, labels


def _expected_manifest(source_folder, paths, labels, class_names, decode_kwargs):
    height, width = decode_kwargs["image_size"]
    settings = {
        "image_size": [height, width],
        "channels": decode_kwargs["channels"],
        "background": list(decode_kwargs["background"]),
        "resize": decode_kwargs["resize"],
        "class_subfolders": labels is not None,
        "files_digest": file_digest(source_folder, paths),
    }
    return {
        "format_version": FORMAT_VERSION,
        "settings": settings,
        "num_files": len(paths),
        "class_names": class_names,
    }


def _complete(folder, manifest, expected):
    """Whether `folder` holds a whole cache of `expected`'s dependencies."""
    if not isinstance(manifest, dict) or _changes(manifest, expected):
        return False
    try:
        images = np.load(os.path.join(folder, IMAGES), mmap_mode="r")
        index = np.load(os.path.join(folder, INDEX))
        labels = np.load(os.path.join(folder, LABELS))
    except (OSError, ValueError):
        return False
    size = os.path.getsize(os.path.join(folder, IMAGES))
    return (
        size == manifest.get("images_bytes")
        and len(images) == expected["num_files"]
        and len(index) == len(labels) == manifest.get("num_images")
    )


def open_or_build(
    cache_dir,
    source_folder,
    paths,
    labels,
    class_names,
    decode_kwargs,
    load,
    verbose=False,
    captions=None,
):
    """Opens the cache in `cache_dir`, building or rebuilding it when needed.

    Args:
        cache_dir: str, the cache folder.
        source_folder: str, the image folder (paths are recorded relative to it).
        paths: the image files, in order.
        labels: their class ids, or `None`.
        class_names: the class folder names, or `None`.
        decode_kwargs: `image_size`, `channels`, `background`, `resize`.
        load: callable `path -> (array or None, (w, h) or reason)`.
        verbose: bool, show a progress bar while building.
        captions: the files' captions (str), or `None`; kept in memory, not
            in the cache (see `DecodeCache`).

    Returns:
        `(DecodeCache, failed, sizes)`: the failed files as `(path, reason)`
        and the source sizes of the decoded ones as `((w, h), count)`.
    """
    cache_dir = os.fspath(cache_dir)
    expected = _expected_manifest(
        source_folder, paths, labels, class_names, decode_kwargs
    )
    manifest = files_lib.read_json(os.path.join(cache_dir, MANIFEST))
    complete = _complete(cache_dir, manifest, expected)
    cache_build.remove_leftovers(cache_dir, complete)
    if not complete:
        cache_build.check_writable(cache_dir)
        why = None
        if isinstance(manifest, dict):
            why = _changes(manifest, expected) or "its files are incomplete or damaged"
        elif os.path.exists(os.path.join(cache_dir, IMAGES)) and not os.path.exists(
            os.path.join(cache_dir, cache_build.PROGRESS)
        ):  # no build was under way: the cache was damaged
            why = "its manifest is missing or unreadable"
        if why is not None:
            warnings.warn(
                f"Rebuilding the decode cache in {cache_dir!r}: {why}.", stacklevel=4
            )
        cache_build.remove(cache_dir, (MANIFEST,))
        manifest = cache_build.build(cache_dir, expected, paths, labels, load, verbose)
    failed = [(paths[i], reason) for i, reason in manifest["failed"]]
    sizes = [((w, h), n) for w, h, n in manifest["sizes"]]
    return DecodeCache(cache_dir, manifest, captions), failed, sizes
