"""Image folders: recursive listing, parallel decode and resize, class subfolders."""

import os
import warnings

import tensorflow as tf

from keras_diffusion.checks import check_int, check_seed
from keras_diffusion.data import pipeline

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif")

# The first bytes of each format `tf.io.decode_image` reads.
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")


def _is_image_file(file_path):
    try:
        with open(file_path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return head.startswith(_SIGNATURES)


def _list_images(folder, follow_links):
    found = []
    for root, dirs, files in os.walk(folder, followlinks=follow_links):
        dirs.sort()
        found.extend(
            os.path.join(root, name)
            for name in sorted(files)
            if name.lower().endswith(IMAGE_EXTENSIONS)
        )
    return found


def _decode(channels, image_size, crop_to_aspect_ratio):
    height, width = image_size

    def decode(file_path):
        image = tf.io.decode_image(
            tf.io.read_file(file_path), channels=3, expand_animations=False
        )
        image = tf.cast(image, tf.float32)
        if crop_to_aspect_ratio:
            shape = tf.cast(tf.shape(image)[:2], tf.float32)
            crop_h = tf.minimum(shape[0], shape[1] * height / width)
            crop_w = tf.minimum(shape[1], shape[0] * width / height)
            image = tf.image.resize_with_crop_or_pad(
                image, tf.cast(crop_h, tf.int32), tf.cast(crop_w, tf.int32)
            )
        image = tf.image.resize(image, image_size, antialias=True)
        if channels == 1:
            # ITU-R 601 luma; these weights sum to exactly 1, unlike
            # tf.image.rgb_to_grayscale's, so white stays 255.
            image = tf.tensordot(image, [0.299, 0.587, 0.114], axes=1)[..., None]
        image.set_shape((height, width, channels))
        return image

    return decode


def from_directory(
    path,
    image_size,
    batch_size=32,
    *,
    channels=3,
    class_subfolders=False,
    crop_to_aspect_ratio=False,
    shuffle=True,
    flip=False,
    seed=None,
    cache=True,
    drop_remainder=False,
    follow_links=False,
    shuffle_buffer_size=None,
):
    """Builds a `tf.data.Dataset` of batches in [-1, 1] from a folder of images.

    The folder is searched recursively for `.png`, `.jpg`, `.jpeg`, `.bmp` and
    `.gif` files (the first frame of a GIF), in sorted order. Files are read,
    decoded and resized in parallel (`num_parallel_calls=AUTOTUNE`). Images
    of any size are resized to `image_size` (bilinear, antialiased), which
    stretches them unless `crop_to_aspect_ratio` is set.

    Unreadable files are skipped, not fatal: files whose first bytes are not
    those of a supported format are skipped before any decoding, with one
    `UserWarning` giving their count and names; a file damaged past its header
    is dropped when decoding fails (`Dataset.ignore_errors`, logged by
    TensorFlow). A folder with no readable image raises `ValueError`.

    Args:
        path: str or path-like, the folder.
        image_size: int or `(height, width)`, the size every image gets.
        batch_size: int, images a batch. Defaults to `32`.
        channels: `1` (grayscale) or `3` (RGB). Defaults to `3`.
        class_subfolders: bool. When `True`, each subfolder of `path` is a
            class, with ids in sorted name order, and the dataset yields
            `(images, labels)`; images directly in `path` are then ignored.
            Defaults to `False`.
        crop_to_aspect_ratio: bool, centre-crop each image to the aspect ratio
            of `image_size` before resizing. Defaults to `False`.
        shuffle: bool, reshuffle every epoch. Defaults to `True`.
        flip: bool, random horizontal flips. Defaults to `False`.
        seed: int or `None`, seeds the shuffle and the flips.
            Defaults to `None`.
        cache: bool, or a file name, for `Dataset.cache` of the decoded,
            resized images, so files are decoded once. Defaults to `True`.
        drop_remainder: bool, drop a last partial batch. Defaults to `False`.
        follow_links: bool, follow symbolic links to folders.
            Defaults to `False`.
        shuffle_buffer_size: int or `None` for all the images.
            Defaults to `None`.

    Returns:
        A `tf.data.Dataset` of float32 batches `(batch, height, width,
        channels)` in [-1, 1], or `(images, labels)` with int32 labels. Its
        `class_names` attribute lists the class folder names (index = label
        id), or is `None` without `class_subfolders`; `file_paths` lists the
        files used, in listing order.

    Example:

    ```python
    ds = from_directory("flowers/", image_size=64, class_subfolders=True)
    ds.class_names  # ['daisy', 'rose', ...]
    ```
    """
    image_size = pipeline.check_image_size(image_size, allow_none=False)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_seed(seed)
    cache = pipeline.check_cache(cache)
    if channels not in (1, 3):
        raise ValueError(
            f"Argument `channels` must be 1 or 3. Received: channels={channels!r}"
        )
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"Argument `path` must be a str or path-like. Received: path={path!r}"
        )
    folder = os.fspath(path)
    if not os.path.isdir(folder):
        raise ValueError(
            "Argument `path` must be an existing folder of images. "
            f"Received: path={folder!r}"
        )

    if class_subfolders:
        class_names = sorted(
            entry.name
            for entry in os.scandir(folder)
            if entry.is_dir(follow_symlinks=follow_links)
        )
        file_paths, labels = [], []
        for class_id, class_name in enumerate(class_names):
            found = _list_images(os.path.join(folder, class_name), follow_links)
            file_paths.extend(found)
            labels.extend([class_id] * len(found))
    else:
        class_names = None
        file_paths = _list_images(folder, follow_links)
        labels = None
    if not file_paths:
        where = "class subfolders of" if class_subfolders else "folder"
        raise ValueError(
            f"Found no image files ({', '.join(IMAGE_EXTENSIONS)}) in the {where} "
            f"`path`. Received: path={folder!r}"
        )

    readable = [_is_image_file(p) for p in file_paths]
    skipped = [p for p, ok in zip(file_paths, readable, strict=True) if not ok]
    if skipped:
        if len(skipped) == len(file_paths):
            raise ValueError(
                f"None of the {len(file_paths)} image files under `path` is a readable "
                f"image, e.g. {skipped[0]!r}. Received: path={folder!r}"
            )
        shown = ", ".join(repr(p) for p in skipped[:5])
        more = f" and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        warnings.warn(
            f"Skipped {len(skipped)} of {len(file_paths)} files under {folder!r} "
            f"that are not readable images: {shown}{more}",
            stacklevel=2,
        )
        file_paths = [p for p, ok in zip(file_paths, readable, strict=True) if ok]
        if labels is not None:
            labels = [y for y, ok in zip(labels, readable, strict=True) if ok]

    decode = _decode(channels, image_size, crop_to_aspect_ratio)
    if labels is None:
        dataset = tf.data.Dataset.from_tensor_slices(file_paths)
        dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        dataset = tf.data.Dataset.from_tensor_slices(
            (file_paths, tf.constant(labels, tf.int32))
        )
        dataset = dataset.map(
            lambda p, y: (decode(p), y), num_parallel_calls=tf.data.AUTOTUNE
        )
    dataset = dataset.ignore_errors(log_warning=True)
    dataset = pipeline.build_pipeline(
        dataset,
        num_examples=len(file_paths),
        value_range=(0.0, 255.0),
        batch_size=batch_size,
        shuffle=shuffle,
        flip=flip,
        seed=seed,
        cache=cache,
        drop_remainder=drop_remainder,
        shuffle_buffer_size=shuffle_buffer_size,
    )
    dataset.class_names = class_names
    dataset.file_paths = file_paths
    return dataset
