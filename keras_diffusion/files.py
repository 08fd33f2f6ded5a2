"""Crash-safe file writes for run folders: any file, `.keras` models, `.npz`.

Every writer here goes through `atomic_write`: the file is written under a
temporary name in the destination folder and moved over the destination with
`os.replace`, which is atomic on POSIX and Windows. A process killed mid-write
leaves the previous file (or none) and a stray temporary, never a truncated
file under the real name.
"""

import contextlib
import os
import tempfile

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
