"""Model and run files: crash-safe writes (any file, `.keras`, `.npz`), and
`load_model`, which says so when a `.keras` file is damaged.

Every writer here goes through `atomic_write`: the file is written under a
temporary name in the destination folder, synced, and moved over the
destination with `os.replace` (atomic on POSIX and Windows); then the folder
is synced, so that the new name survives a power loss too. A process killed
at any point leaves the previous file (or none) and perhaps a stray
temporary, never a truncated file under the real name. Temporary names are
`.<name>.<8 characters>.tmp<ending>`: `is_temporary` tells them apart, and
`remove_temporaries` clears what a killed writer left in a folder.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
import zipfile
import zlib

import keras
import numpy as np

from keras_diffusion.utils import run_files, settings

# `.<name>.<8 random characters>.tmp<ending>`: what `atomic_write` (through
# `tempfile.mkstemp`) and `temporary_path` name their files.
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp(\.\w+)?$")


def is_temporary(name):
    """Whether the file or folder name `name` is one of a writer's temporaries."""
    return bool(_TEMPORARY.match(os.path.basename(os.fspath(name))))


def temporary_path(path, suffix=""):
    """A fresh temporary name next to `path` (nothing is created)."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp{suffix}")


def remove_temporaries(folder):
    """Removes the temporaries that killed writers left in `folder` (files and
    folders); returns their names. A missing folder holds none."""
    try:
        names = sorted(n for n in os.listdir(folder) if is_temporary(n))
    except FileNotFoundError:
        return []
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return names


@contextlib.contextmanager
def atomic_write(path, suffix=None):
    """Yields a temporary path next to `path`; moves it to `path` on success.

    The temporary is synced before the move, and the folder after it.

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
        fsync_file(tmp)
        os.replace(tmp, path)
        fsync_folder(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def fsync_file(path):
    """Flushes the file `path` to the disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_folder(folder):
    """Flushes the folder `folder`'s entries (names made, moved or removed) to
    the disk, where the platform can (not on Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder
    finally:
        os.close(fd)


def read_json(path):
    """The JSON value in the file `path`, or `None` where the file is missing,
    unreadable or not JSON (a reader that falls back rather than fails)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def run_config(model):
    """The `config.json` of the folder a model path stands for (a run folder,
    or the folder of a `.keras` file) as a dict, or `None` where it has none
    (a model object, a file of one's own, a missing or unreadable file);
    one written by section is read flat (`settings.flat`)."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    config = read_json(os.path.join(run_files.folder_of(model), run_files.CONFIG_FILE))
    return settings.flat(config)


def run_setting(model, name, default):
    """The setting `name` of the run that wrote `model` (a run folder or the
    `.keras` file in one), from its `config.json`; `default` for a model
    outside a run folder (a diffusers folder, a file of one's own)."""
    if not isinstance(model, (str, os.PathLike)):
        return default
    if not run_files.is_run_folder(run_files.folder_of(model)):
        return default
    value = (run_config(model) or {}).get(name)
    return default if value is None else value


def save_model(model, path):
    """`model.save(path)` through a temporary file, so `path` is never partial."""
    with atomic_write(path, suffix=".keras") as tmp:
        model.save(tmp)


def save_npz(path, **arrays):
    """`np.savez_compressed` through a temporary file."""
    with atomic_write(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


def model_file(path):
    """The `.keras` file that `path` names: itself, or a run folder's
    `model.keras`.

    Raises:
        ValueError: naming `path`: it does not exist, is a run folder whose
            run has not finished, or is neither a `.keras` file nor a folder.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        inner = os.path.join(path, run_files.MODEL_FILE)
        if os.path.isfile(inner):
            return inner
        if run_files.is_run_folder(path):
            raise ValueError(
                f"{path!r} is a run folder without {run_files.MODEL_FILE}: its "
                "run has not finished. Resume it with the same scripts/train.py "
                "command, or pass a finished run."
            )
        raise ValueError(
            f"{path!r} is a folder without {run_files.MODEL_FILE}: pass a .keras "
            "file or a run folder of scripts/train.py."
        )
    if not os.path.exists(path):
        raise ValueError(f"No such file or folder: {path!r}")
    if not path.endswith(".keras"):
        raise ValueError(
            f"{path!r} is not a .keras file: pass a .keras model or a run folder."
        )
    return path


# Keras' message for a class the loading process has not registered ends
# with the object's config: its module and registered name.
_UNKNOWN_CLASS = re.compile(r"Could not locate class '([^']+)'")
_FIELD = "'{}': '([^']+)'"


def _unknown_class(error, path):
    """A one-line `ValueError` for Keras' unknown-class error, or `None`."""
    text = str(error)
    found = _UNKNOWN_CLASS.search(text)
    if found is None:
        return None
    tail = text[found.end() :]
    module = re.search(_FIELD.format("module"), tail)
    registered = re.search(_FIELD.format("registered_name"), tail)
    name = registered.group(1) if registered else found.group(1)
    module = module.group(1) if module else "the module that defines it"
    return ValueError(
        f"{path!r} holds a {name!r} from module {module!r}, a class this "
        "process does not know: register it with "
        "@keras.saving.register_keras_serializable() and import its module "
        f"before loading (the scripts: --import {module})."
    )


def load_model(path):
    """`keras.saving.load_model` (safe mode) of a `.keras` file or a run
    folder (its `model.keras`), with a one-line error.

    Raises:
        ValueError: naming the path: it is not a `.keras` file or a run
            folder (`model_file`), it is not a readable `.keras` archive
            (truncated or corrupt), or it holds a class this process has not
            registered (the message says how to register and import it).
    """
    path = model_file(path)
    # Importing this module imported keras_diffusion, whose classes are now
    # registered for safe-mode loading.
    invalid = (
        f"{path!r} exists ({os.path.getsize(path):,} bytes) but is not a valid "
        ".keras archive: it is truncated or corrupt (a copy cut short, or a "
        "save that was interrupted)"
    )
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{invalid}.")
    try:
        return keras.saving.load_model(path)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as error:
        raise ValueError(
            f"{invalid} ({type(error).__name__}: {' '.join(str(error).split())})."
        ) from error
    except TypeError as error:
        unknown = _unknown_class(error, path)
        if unknown is None:
            raise
        raise unknown from None
