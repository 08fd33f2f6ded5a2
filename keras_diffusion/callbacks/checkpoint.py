"""AtomicModelCheckpoint: `.keras` checkpoints written to a temporary file and renamed.

`keras.callbacks.ModelCheckpoint` writes the file in place, so a kill
mid-write leaves a truncated file.
"""

import os

import keras

from keras_diffusion.utils import files
from keras_diffusion.utils.checks import check_int


class AtomicModelCheckpoint(keras.callbacks.Callback):
    """Saves the whole model to a `.keras` file every `every` epochs, atomically.

    Like `keras.callbacks.ModelCheckpoint(filepath)` with the default
    `save_best_only=False`, but the file is written under a temporary name and
    renamed, so a crash mid-save leaves the previous checkpoint intact.

    Args:
        filepath: str ending in `.keras`; may contain `{epoch}` (1-based).
        every: int, save after every `every`-th epoch. Defaults to `1`.
    """

    def __init__(self, filepath, every=1):
        super().__init__()
        filepath = os.fspath(filepath)
        if not filepath.endswith(".keras"):
            raise ValueError(
                "Argument `filepath` must end in '.keras'. "
                f"Received: filepath={filepath!r}"
            )
        self.filepath = filepath
        self.every = check_int("every", every, 1)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0:
            files.save_model(self.model, self.filepath.format(epoch=epoch + 1))
