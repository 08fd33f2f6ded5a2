"""Model and run files: crash-safe writes (any file, `.keras`, `.npz`), and
`load_model`, which says so when a `.keras` file is damaged.

Every writer here goes through `atomic_write`: the file is written under a
temporary name in the destination folder and moved over the destination with
`os.replace`, which is atomic on POSIX and Windows. A process killed mid-write
leaves the previous file (or none) and a stray temporary, never a truncated
file under the real name.
"""

import contextlib
import os
import tempfile
import zipfile
import zlib

import keras
import numpy as np


@contextlib.contextmanager
def atomic_write(path, suffix=None):
    """Yields a temporary path next to `path`; renames it to `path` on success.

    Args:
        path: str or path-like, the final file.
        suffix: str, the temporary file's ending; some writers insist on one
            (`model.save` needs `.keras`). Defaults to the ending of `path`.

    Example:

    ```python
    with atomic_write("run/model.keras") as tmp:
        model.save(tmp)
    ```
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if suffix is None:
        suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(path)}.", suffix=f".tmp{suffix}"
    )
    os.close(fd)
    # mkstemp makes the file private (0600); give it the usual permissions.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _fsync(path):
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def save_model(model, path):
    """`model.save(path)` through a temporary file, so `path` is never partial."""
    with atomic_write(path, suffix=".keras") as tmp:
        model.save(tmp)


def save_npz(path, **arrays):
    """`np.savez_compressed` through a temporary file."""
    with atomic_write(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def load_model(path):
    """`keras.saving.load_model(path)` (safe mode) with a clear error.

    Raises:
        ValueError: `path` is not an existing `.keras` file, or it exists but
            is not a readable `.keras` archive (truncated or corrupt).
    """
    path = os.fspath(path)
    if not path.endswith(".keras") or not os.path.isfile(path):
        raise ValueError(
            "Argument `model` must be an existing .keras file. "
            f"Received: model={path!r}"
        )
    # Importing this module imported keras_diffusion, whose classes are now
    # registered for safe-mode loading.
    invalid = (
        f"Argument `model` names a file that exists ({os.path.getsize(path):,} "
        "bytes) but is not a valid .keras archive: it is truncated or corrupt "
        "(a copy cut short, or a save that was interrupted)"
    )
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{invalid}. Received: model={path!r}")
    try:
        return keras.saving.load_model(path)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as error:
        raise ValueError(
            f"{invalid} ({type(error).__name__}: {' '.join(str(error).split())}). "
            f"Received: model={path!r}"
        ) from error
