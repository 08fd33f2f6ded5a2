"""PosthocSnapshots: writes a model's power-function EMA profiles to a folder
every so many optimizer updates, for post-hoc EMA
(`keras_diffusion.averages.posthoc`)."""

import keras

from keras_diffusion.averages import posthoc
from keras_diffusion.utils.checks import check_int


class PosthocSnapshots(keras.callbacks.Callback):
    """Snapshots of `model.power_ema` every `every` optimizer updates.

    A snapshot is written at the first step boundary at or after each
    multiple of `every` (with `steps_per_execution`, boundaries come every
    so many steps), and at update `last` (the run's end), each atomically.
    At the start of `fit` the snapshots of updates the model has not made
    are removed: after a resume from an earlier backup they belong to an
    abandoned future, and the resumed run writes its own.

    Disk use: (`last` / `every` + 1) snapshots of `len(sigma_rels)` float32
    copies of the trainable weights.

    Args:
        folder: str, the snapshot folder (a run's `posthoc_ema/`).
        every: int >= 1, optimizer updates between snapshots.
        last: optional int, the update count of the run's end, also
            snapshotted. Defaults to `None`.
    """

    per_call_batch_hooks = True

    def __init__(self, folder, every, last=None):
        super().__init__()
        self.folder = folder
        self.every = check_int("every", every, 1)
        self.last = None if last is None else check_int("last", last, 1)
        self._written = 0

    def on_train_begin(self, logs=None):
        if getattr(self.model, "power_ema", None) is None:
            raise ValueError(
                "PosthocSnapshots needs a model with post-hoc EMA profiles: "
                "DiffusionModel(..., posthoc_ema=[0.05, 0.1]). Received: a "
                "model whose posthoc_ema is None"
            )
        self._written = self.model.power_ema.updates()
        posthoc.remove_after(self.folder, self._written)

    def on_train_batch_end(self, batch, logs=None):
        t = self.model.power_ema.updates()
        due = t // self.every > self._written // self.every or t == self.last
        if due and t > self._written:
            posthoc.write_snapshot(self.folder, self.model.power_ema)
            self._written = t
