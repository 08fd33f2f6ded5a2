"""Writing the decode cache: its files, and a build that can be interrupted.

The layout is `keras_diffusion.data.cache`'s (described there). A build
reserves `images.npy.partial` at its full size (a full disk fails at once,
not halfway), decodes the files in chunks on a thread per core, writes each
chunk with `pwrite`, syncs it and records the chunk in `progress.json`;
`manifest.json` is written last, once every other file is in place. A build
interrupted at any point resumes from the last recorded chunk (one cut short
after its last chunk only writes what follows it); one stopped by a full
disk removes what it wrote. The temporaries of writes cut short are removed
by `remove_leftovers`.
"""

import concurrent.futures
import errno
import json
import os
import tempfile
import time

import keras
import numpy as np

from keras_diffusion.utils import files as files_lib

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
IMAGES = "images.npy"
INDEX = "index.npy"
LABELS = "labels.npy"
PARTIAL = IMAGES + ".partial"
PROGRESS = "progress.json"
# Images decoded, written and recorded as done at a time.
_CHUNK = 512


def write_json(path, value):
    with files_lib.atomic_write(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(value, f)


def check_writable(folder):
    """Makes `folder` and checks that files can be written in it.

    Raises:
        ValueError: naming `cache` and the folder, before anything is decoded.
    """
    try:
        os.makedirs(folder, exist_ok=True)
        # A name `remove_leftovers` clears, should a kill come before the removal.
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test.", suffix=".tmp")
        os.close(fd)
        os.remove(probe)
    except OSError as error:
        raise ValueError(
            "Argument `cache` must be a folder the decode cache can be written "
            f"to ({error.strerror or error}). Received: cache={folder!r}"
        ) from error


def remove_leftovers(folder, complete):
    """Removes what a build killed mid-write left in `folder`: writers'
    temporaries, and once the cache is `complete`, its progress file. A
    folder that cannot be written (a shared, read-only cache) is left as it
    is."""
    try:
        files_lib.remove_temporaries(folder)
        if complete:
            remove(folder, (PROGRESS,))
    except OSError:
        pass


def remove(folder, names):
    for name in names:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            os.remove(path)


def _reserve(fd, size):
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as error:
            if error.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return  # the file system cannot reserve; writes still check
            raise


def _start(cache_dir, expected, shape):
    """A fresh `images.npy.partial` of `shape`; returns its header length."""
    remove(cache_dir, (PARTIAL, PROGRESS, IMAGES, INDEX, LABELS))
    path = os.path.join(cache_dir, PARTIAL)
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
    header = array.offset
    del array
    with open(path, "r+b") as f:
        _reserve(f.fileno(), header + int(np.prod(shape)))
    progress = {"key": expected, "done": 0, "failed": [], "sizes": {}}
    write_json(os.path.join(cache_dir, PROGRESS), progress)
    return header, progress


def _resumable(cache_dir, expected, shape):
    """`(header, progress)` of an interrupted build of the same cache, or None."""
    progress = files_lib.read_json(os.path.join(cache_dir, PROGRESS))
    if not isinstance(progress, dict) or progress.get("key") != expected:
        return None
    path = os.path.join(cache_dir, PARTIAL)
    if not os.path.exists(path) and progress.get("done") == shape[0]:
        # Cut short after the images were moved into place, before the manifest.
        path = os.path.join(cache_dir, IMAGES)
    if not os.path.exists(path):
        return None
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if array.shape != shape or array.dtype != np.uint8:
        return None
    return array.offset, progress


def build(cache_dir, expected, paths, labels, load, verbose):
    height, width = expected["settings"]["image_size"]
    channels = expected["settings"]["channels"]
    shape = (len(paths), height, width, channels)
    row_bytes = height * width * channels
    try:
        resumed = _resumable(cache_dir, expected, shape)
        if resumed is None:
            header, progress = _start(cache_dir, expected, shape)
        else:
            header, progress = resumed
            print(
                f"Resuming the decode cache build in {cache_dir!r} at "
                f"{progress['done']:,}/{len(paths):,} images."
            )
        _decode_into(cache_dir, paths, load, header, row_bytes, progress, verbose)
        return _finish(cache_dir, expected, labels, progress, header, shape)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        remove(cache_dir, (PARTIAL, PROGRESS, IMAGES, INDEX, LABELS, MANIFEST))
        needed = int(np.prod(shape))
        raise OSError(
            error.errno,
            f"The disk filled while building the decode cache in {cache_dir!r} "
            f"(it needs about {needed / 1e9:.2f} GB); the partial cache was "
            "removed. Free space there or choose another cache folder.",
        ) from error


def _decode_into(cache_dir, paths, load, header, row_bytes, progress, verbose):
    total = len(paths)
    done = progress["done"]
    if done >= total:
        return  # every chunk is written (the images may be in place already)
    bar = None
    if verbose:
        bar = keras.utils.Progbar(
            total, unit_name="image", stateful_metrics=["images/s"]
        )
        bar.update(done)
    failed, sizes = progress["failed"], progress["sizes"]
    workers = min(32, (os.cpu_count() or 1) + 2)
    started, started_at = time.perf_counter(), done
    zeros = bytes(row_bytes)
    fd = os.open(os.path.join(cache_dir, PARTIAL), os.O_RDWR)
    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:

            def submit(start):
                chunk = range(start, min(start + _CHUNK, total))
                return chunk, [pool.submit(load, paths[i]) for i in chunk]

            pending = submit(done) if done < total else None
            while pending is not None:
                chunk, decoded = pending
                # The next chunk decodes while this one is written and synced.
                pending = submit(chunk.stop) if chunk.stop < total else None
                for i, future in zip(chunk, decoded, strict=True):
                    array, info = future.result()
                    if array is None:
                        failed.append([i, info])
                        data = zeros
                    else:
                        key = f"{info[0]}x{info[1]}"
                        sizes[key] = sizes.get(key, 0) + 1
                        data = np.ascontiguousarray(array).tobytes()
                    _write_all(fd, data, header + i * row_bytes)
                done = chunk.stop
                os.fsync(fd)
                progress["done"] = done
                write_json(os.path.join(cache_dir, PROGRESS), progress)
                if bar is not None:
                    rate = (done - started_at) / max(
                        time.perf_counter() - started, 1e-9
                    )
                    bar.update(done, values=[("images/s", rate)])
    finally:
        os.close(fd)


def _write_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _finish(cache_dir, expected, labels, progress, header, shape):
    failed_rows = {i for i, _ in progress["failed"]}
    index = np.asarray([i for i in range(shape[0]) if i not in failed_rows], np.int64)
    all_labels = (
        np.zeros(shape[0], np.int32) if labels is None else np.asarray(labels, np.int32)
    )
    for name, array in ((INDEX, index), (LABELS, all_labels[index])):
        with files_lib.atomic_write(os.path.join(cache_dir, name)) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, array)
    partial = os.path.join(cache_dir, PARTIAL)
    if os.path.exists(partial):  # not yet moved by a build that was cut short
        os.replace(partial, os.path.join(cache_dir, IMAGES))
    manifest = dict(expected)
    manifest.update(
        num_images=len(index),
        images_bytes=header + int(np.prod(shape)),
        failed=progress["failed"],
        sizes=[
            [int(w), int(h), n]
            for (w, h), n in (
                (tuple(k.split("x")), n) for k, n in progress["sizes"].items()
            )
        ],
    )
    write_json(os.path.join(cache_dir, MANIFEST), manifest)
    remove(cache_dir, (PROGRESS,))
    return manifest
