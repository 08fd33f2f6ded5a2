"""One loader for every kind of saved model: `load`."""

import os

from keras_diffusion.interop.diffusers import from_diffusers
from keras_diffusion.utils import files, run_files


def load(source):
    """The `DiffusionModel` of a `.keras` file, a run folder (its
    `model.keras`), a diffusers folder or a Hub id."""
    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if path is not None and (path.endswith(".keras") or run_files.is_run_folder(path)):
        return files.load_model(path)
    return from_diffusers(source)
