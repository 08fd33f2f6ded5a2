"""Image folders: recursive listing, parallel decoding, class subfolders.

Every file is decoded once, up front, by `keras_diffusion.data.decode` on a
pool of threads (Pillow releases the GIL while it decodes and resizes), into
one uint8 array at the training size. Training then reads memory only: no
Python runs in the input pipeline, and a file that cannot be decoded is
known, counted and reported before the first step. With `cache=DIR` the
array is a memory-mapped file written once (`keras_diffusion.data.cache`),
for folders larger than memory and for runs that start again.
"""

import concurrent.futures
import os
import shutil
import typing

import keras
import numpy as np
import tensorflow as tf

from keras_diffusion.data import cache as cache_lib
from keras_diffusion.data import captions as captions_lib
from keras_diffusion.data import decode, listing, ordered, pipeline
from keras_diffusion.data.batching import check_batching, scale_batches
from keras_diffusion.data.folder_report import IMAGE_EXTENSIONS, extension, report
from keras_diffusion.utils.checks import check_choice

# What Pillow raises for unknown, truncated or corrupt files.
_DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError)
# Images decoded between two updates of the progress bar.
_PROGRESS_EVERY = 64
# Decoded images are uint8.
_UINT8_RANGE = (0.0, 255.0)


class _FolderOptions(typing.NamedTuple):
    """How `from_directory` lists and decodes a folder (its arguments)."""

    image_size: typing.Any
    channels: int = 3
    background: typing.Any = decode.DEFAULT_BACKGROUND
    resize: str = decode.DEFAULT_RESIZE
    class_subfolders: bool = False
    follow_links: bool = False
    caption_column: typing.Any = None


def _decode_all(paths, decode_kwargs, verbose):
    """`[(array or None, source size or error message)]`, one per path."""
    load = _loader(decode_kwargs)
    progress = keras.utils.Progbar(len(paths), unit_name="image") if verbose else None
    results = []
    workers = min(32, (os.cpu_count() or 1) + 2)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for result in pool.map(load, paths):
            results.append(result)
            if progress is not None and (
                len(results) % _PROGRESS_EVERY == 0 or len(results) == len(paths)
            ):
                progress.update(len(results))
    return results


def _checked_files(folder, options):
    """Checks the arguments (`options`, a `_FolderOptions`); `(folder,
    all_files, files, labels, class_names, decode_kwargs)` of the images
    found, `labels` the images' captions (str) when `caption_column` is given
    and the folder has metadata."""
    caption_column = captions_lib.check_caption_column(options.caption_column)
    image_size = pipeline.check_image_size(options.image_size, allow_none=False)
    channels, resize = options.channels, options.resize
    if channels not in (1, 3):
        raise ValueError(
            f"Argument `channels` must be 1 or 3. Received: channels={channels!r}"
        )
    background = decode.parse_background(options.background)
    check_choice("resize", resize, decode.RESIZE_MODES)
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(
            f"Argument `folder` must be a str or path-like. Received: folder={folder!r}"
        )
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise ValueError(
            "Argument `folder` must be an existing folder of images. "
            f"Received: folder={folder!r}"
        )
    if options.class_subfolders:
        class_names, all_files, labels = listing.class_files(
            folder, options.follow_links
        )
    else:
        class_names, labels = None, None
        all_files = listing.list_files(folder, options.follow_links)
    is_image = [extension(p) in IMAGE_EXTENSIONS for p in all_files]
    files = [p for p, ok in zip(all_files, is_image, strict=True) if ok]
    if labels is not None:
        labels = [y for y, ok in zip(labels, is_image, strict=True) if ok]
    elif caption_column is not None:
        labels = listing.captions(folder, all_files, files, caption_column)
    decode_kwargs = {
        "image_size": image_size,
        "channels": channels,
        "background": background,
        "resize": resize,
    }
    return folder, all_files, files, labels, class_names, decode_kwargs


def _loader(decode_kwargs):
    def load(path):
        try:
            return decode.load_image(path, **decode_kwargs)
        except _DECODE_ERRORS as error:
            return None, " ".join(str(error).split()) or type(error).__name__

    return load


def load_directory_arrays(folder, image_size, *, verbose=False, **options):
    """Decodes every image under a folder; the arrays behind `from_directory`.

    Args:
        folder, image_size, verbose: as `from_directory`.
        **options: `from_directory`'s `channels`, `background`, `resize`,
            `class_subfolders`, `follow_links` and `caption_column`, with its
            defaults, except that `caption_column` defaults to `None` here
            (metadata files are not read).

    Returns:
        `(images, labels, class_names, file_paths)`: uint8 images `(N, height,
        width, channels)`, int32 labels `(N,)`, or the captions (a str array
        `(N,)`) of a folder with metadata when `caption_column` is given, or
        `None`; the class folder names or `None`, and the path of each image.
    """
    return _decode_folder(folder, _FolderOptions(image_size, **options), verbose)


def _decode_folder(folder, options, verbose):
    """`load_directory_arrays` of a `_FolderOptions`."""
    folder, all_files, files, labels, class_names, decode_kwargs = _checked_files(
        folder, options
    )
    results = _decode_all(files, decode_kwargs, verbose)
    decoded = [array is not None for array, _ in results]
    failed = [
        (p, info) for p, (a, info) in zip(files, results, strict=True) if a is None
    ]
    sizes = [info for array, info in results if array is not None]
    report(
        folder, all_files, files, failed, sizes, decode_kwargs, options.class_subfolders
    )

    images = np.stack([array for array, _ in results if array is not None])
    file_paths = [p for p, ok in zip(files, decoded, strict=True) if ok]
    if labels is not None:
        labels = np.asarray(
            [y for y, ok in zip(labels, decoded, strict=True) if ok],
            np.int32 if options.class_subfolders else object,
        )
    return images, labels, class_names, file_paths


def _first_missing(path):
    """The outermost folder of `path` that does not exist yet, or `None`."""
    path, missing = os.path.abspath(path), None
    while not os.path.exists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _cached_batches(folder, cache, options, batching, verbose):
    """`(uint8 batches, cache, class_names, file_paths)` read from (and built
    into) the decode cache."""
    folder, all_files, files, labels, class_names, decode_kwargs = _checked_files(
        folder, options
    )
    if not files:
        report(
            folder, all_files, files, [], [], decode_kwargs, options.class_subfolders
        )
    created = _first_missing(cache)
    # Captions stay out of the cache: editing them rebuilds nothing.
    captions = None if options.class_subfolders else labels
    opened, failed, size_counts = cache_lib.open_or_build(
        cache,
        folder,
        files,
        labels if options.class_subfolders else None,
        class_names,
        decode_kwargs,
        _loader(decode_kwargs),
        verbose=verbose,
        captions=captions,
    )
    sizes = [size for size, count in size_counts for _ in range(count)]
    try:
        report(
            folder,
            all_files,
            files,
            failed,
            sizes,
            decode_kwargs,
            options.class_subfolders,
        )
    except ValueError:
        # Nothing decodable is bad input: leave no folder behind for it.
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    batches = opened.dataset(
        batching.batch_size,
        shuffle=batching.shuffle,
        seed=batching.seed,
        drop_remainder=batching.drop_remainder,
        buffer=batching.shuffle_buffer_size,
    )
    file_paths = [files[i] for i in opened.index]
    return batches, opened, class_names, file_paths


def _cached_pipeline(folder, cache, options, batching, verbose):
    """`from_directory` through the decode cache in the folder `cache`."""
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(
            "Argument `cache` must be a folder (str or path-like) or None. "
            f"Received: cache={cache!r}"
        )
    batches, opened, class_names, file_paths = _cached_batches(
        folder, os.fspath(cache), options, batching, verbose
    )
    dataset = scale_batches(
        batches, value_range=_UINT8_RANGE, flip=batching.flip, seed=batching.seed
    ).prefetch(tf.data.AUTOTUNE)
    dataset.class_names = class_names
    dataset.file_paths = file_paths
    dataset.num_examples = len(opened)
    dataset.decode_cache = opened
    dataset.captions = opened.captions
    return ordered.attach(
        dataset, len(opened), opened.gather_op, batching, value_range=_UINT8_RANGE
    )


def _memory_pipeline(folder, options, batching, verbose):
    """`from_directory` decoded into memory, then `from_arrays`."""
    images, labels, class_names, file_paths = _decode_folder(folder, options, verbose)
    dataset = pipeline.from_arrays(
        images, labels, value_range=_UINT8_RANGE, **batching._asdict()
    )
    dataset.class_names = class_names
    dataset.file_paths = file_paths
    return dataset


def from_directory(
    folder,
    batch_size,
    image_size,
    *,
    channels=3,
    background=decode.DEFAULT_BACKGROUND,
    resize=decode.DEFAULT_RESIZE,
    class_subfolders=False,
    shuffle=True,
    flip=False,
    seed=None,
    drop_remainder=False,
    follow_links=False,
    shuffle_buffer_size=None,
    verbose=False,
    cache=None,
    caption_column="text",
):
    """Builds a `tf.data.Dataset` of batches in [-1, 1] from a folder of images.

    The folder is searched recursively for `.png`, `.jpg`, `.jpeg`, `.gif`,
    `.bmp` and `.webp` files (any letter case; hidden files and folders are
    skipped; other files are ignored), in sorted order. Each is decoded as a
    person sees it (`keras_diffusion.data.decode`: transparency over
    `background`, 16-bit PNGs scaled to 8 bits, EXIF orientation, the first
    frame of an animation, CMYK converted), once, in parallel threads, into
    memory as uint8 at `image_size` (10,000 RGB images at 64x64 take 123 MB).
    With `cache`, into a memory-mapped file in that folder instead, once:
    later calls (a resumed run) read it without decoding, and resident memory
    stays flat however large the folder (`keras_diffusion.data.cache`).

    Files that cannot be decoded are skipped with one `UserWarning` giving
    their count, names and reasons; a folder with no decodable image raises
    `ValueError` naming the folder and the files seen per extension. When
    every image is smaller than `image_size` a `UserWarning` names the sizes.
    A `metadata.jsonl` or `metadata.csv` beside the images (Hugging Face's
    imagefolder layout, `keras_diffusion.data.captions`) gives `(images,
    captions)` batches; its problems raise one `ValueError`, before any write.

    Args:
        folder: str or path-like, the folder.
        batch_size: int, images a batch.
        image_size: int or `(height, width)`, the size every image gets.
        channels: `1` (greyscale) or `3` (RGB). Defaults to `3`.
        background: the colour under transparent pixels: `"white"` (icons
            and emoji are drawn for a light page), `"black"`, `"R,G,B"` or an
            `(R, G, B)` tuple. Defaults to `"white"`.
        resize: how an image of another aspect ratio gets `image_size`:
            `"crop"` (centre crop, then resize: no borders the data does not
            have), `"pad"` (resize to fit, then pad with `background`: whole
            objects) or `"stretch"`. Defaults to `"crop"`.
        class_subfolders: bool. When `True`, each subfolder of `folder` is a
            class, with ids in sorted name order, and the dataset yields
            `(images, labels)`; images directly in `folder` are then ignored.
            Defaults to `False`.
        shuffle: bool, reshuffle every epoch. Defaults to `True`.
        flip: bool, random horizontal flips. Defaults to `False`.
        seed: int or `None`, seeds the shuffle and the flips.
            Defaults to `None`.
        drop_remainder: bool, drop a last partial batch. Defaults to `False`.
        follow_links: bool, follow symbolic links to folders. Defaults to `False`.
        shuffle_buffer_size: int or `None` for all the images.
            Defaults to `None`.
        verbose: bool, show a progress bar while decoding. Defaults to `False`.
        cache: str or path-like, a folder for the decode cache, or `None` to
            decode into memory. Any change to the files (sizes, mtimes) or
            the decode settings rebuilds it, with a `UserWarning` saying why.
            An interrupted build resumes. Defaults to `None`.
        caption_column: str, the metadata's caption column, or `None` to read
            no captions (nor does a folder without metadata, or
            `class_subfolders=True`). Defaults to `"text"`.

    Returns:
        A `tf.data.Dataset` of float32 batches `(batch, height, width,
        channels)` in [-1, 1], or `(images, labels)` with int32 labels, or
        `(images, captions)` with `tf.string` captions `(batch,)`. Its
        `class_names` attribute lists the class folder names (index = label
        id) or is `None`; `file_paths` lists the files decoded, in listing
        order; `num_examples` counts them; `captions` lists their captions.

    Example:

    ```python
    ds = from_directory("emoji/", 64, image_size=64, background="white")
    ds = from_directory("flowers/", 64, image_size=64, class_subfolders=True)
    ds.class_names  # ['daisy', 'rose', ...]
    ds = from_directory("ffhq/", 64, image_size=256, cache="ffhq_cache/")
    # captioned/metadata.jsonl: {"file_name": "1f431.png", "text": "cat face"}
    images, captions = next(iter(from_directory("captioned/", 64, 32)))
    ```
    """
    batching = check_batching(
        batch_size, seed, shuffle, flip, drop_remainder, shuffle_buffer_size
    )
    decoding = (image_size, channels, background, resize, class_subfolders)
    options = _FolderOptions(*decoding, follow_links, caption_column)
    if cache is not None:
        return _cached_pipeline(folder, cache, options, batching, verbose)
    return _memory_pipeline(folder, options, batching, verbose)
