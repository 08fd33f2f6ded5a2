"""The backup folder: generations of a run's resume state, each committed in
one atomic step.

A generation is a weights file (`gen-000007.weights.h5`: the model, its EMA,
the optimizer slots, the noise seed state) and a record: the epochs done,
the steps done of the next epoch and the state of that epoch's loss mean.
`training_metadata.json` holds the record of the newest generation and of
the one before it, each naming its weights file:

    {"format": 2, "generation": 7, "weights": "gen-000007.weights.h5",
     "epoch": 1, "step": 3, "metrics": [...], "previous": {"generation": 6, ...}}

`commit` writes the weights of a new generation under their own new name and
syncs them, then moves a new record over `training_metadata.json`
(`keras_diffusion.utils.files.atomic_write`). That move is the one atomic
step: before it the folder holds the older generations, after it the new
one. Only then does it remove every file that the record does not name
(older generations, and the leftovers of a commit that a kill cut short), so
that a kill at any point leaves the newest committed generation and the one
before it. `newest` reads the newest committed generation whose weights
file is readable: the one before it when the newest's are damaged.

A folder written by an earlier release (`latest.weights.h5` and
`training_metadata.json`, the names of `keras.callbacks.BackupAndRestore`,
with the `.bkp` pair of a write that may have been cut short between its
renames; `keras_diffusion.utils.keras_internals`) reads as one or two
generations numbered 0, and the next commit replaces it.
"""

import dataclasses
import json
import os
import shutil

import h5py

from keras_diffusion.utils import files, keras_internals

RECORD_FILE = keras_internals.BACKUP_METADATA_FILE
FORMAT_VERSION = 2
_LEGACY_WEIGHTS = keras_internals.BACKUP_WEIGHTS_FILE
_LEGACY_PREVIOUS = keras_internals.BACKUP_PREVIOUS_SUFFIX


@dataclasses.dataclass(frozen=True)
class Generation:
    """One committed backup: its weights file (a name in the backup folder)
    and how far the run had got."""

    number: int
    weights: str
    epoch: int
    step: int = 0
    metrics: list | None = None
    # What `jit_compile="auto"` chose (`None`: not measured), applied again on
    # a resume so that it trains as the interrupted run did.
    jit_choice: bool | None = None
    # What identifies the data the run trained on
    # (`keras_diffusion.data.identity`), or `None`.
    data: dict | None = None

    def record(self):
        return {
            "generation": self.number,
            "weights": self.weights,
            "epoch": self.epoch,
            "step": self.step,
            "metrics": self.metrics,
            "jit_choice": self.jit_choice,
            "data": self.data,
        }


def _generation(record, weights=None):
    """The `Generation` of a record (`weights` for a record that names none),
    or `None` when it is not a readable one."""
    if not isinstance(record, dict):
        return None
    try:
        return Generation(
            number=int(record.get("generation", 0)),
            weights=os.path.basename(str(weights or record["weights"])),
            epoch=int(record["epoch"]),
            step=int(record.get("step", 0)),
            metrics=record.get("metrics"),
            jit_choice=_choice(record.get("jit_choice")),
            data=record.get("data") if isinstance(record.get("data"), dict) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _choice(value):
    return None if value is None else bool(value)


def generations(folder):
    """The committed generations in `folder`, newest first (none, one or two)."""
    record = files.read_json(os.path.join(folder, RECORD_FILE))
    if isinstance(record, dict) and "weights" in record:
        found = [_generation(record), _generation(record.get("previous"))]
        return [g for g in found if g is not None]
    return _legacy_generations(folder, record)


def _legacy_generations(folder, record):
    # The earlier writer renamed the weights to `.bkp`, then the record, then
    # moved the new pair in: cut short after the first rename, the record is
    # the one whose weights are now `.bkp`; after the second, there is no
    # record and the `.bkp` pair is whole.
    weights, previous = _LEGACY_WEIGHTS, _LEGACY_WEIGHTS + _LEGACY_PREVIOUS
    previous_record = files.read_json(
        os.path.join(folder, RECORD_FILE + _LEGACY_PREVIOUS)
    )
    current = _generation(record, weights)
    if current is None:
        found = [_generation(previous_record, previous)]
    elif not os.path.exists(os.path.join(folder, weights)):
        found = [_generation(record, previous)]
    else:
        found = [current, _generation(previous_record, previous)]
    return [g for g in found if g is not None]


def _readable_weights(path):
    try:
        with h5py.File(path, "r") as f:
            f.visit(lambda name: None)
        return True
    except (OSError, ValueError):
        return False


def newest(folder):
    """The newest committed generation in `folder` whose weights file is
    readable, or `None` when the folder holds no generation.

    Raises:
        ValueError: the folder holds generations, and none of their weights
            files is readable (damaged on the disk, or removed by hand).
    """
    found = generations(folder)
    for generation in found:
        if _readable_weights(os.path.join(folder, generation.weights)):
            return generation
    if not found:
        return None
    path = os.path.join(folder, found[0].weights)
    what = (
        f"exist ({os.path.getsize(path):,} bytes) but are not a valid weights file: "
        "they are truncated or corrupt"
        if os.path.exists(path)
        else "are missing"
    )
    before = ", and so are those of the generation before" if len(found) > 1 else ""
    raise ValueError(
        f"The interrupted run's backup weights {path!r} {what}{before}. Pass "
        "--overwrite (overwrite=True) to start the run again."
    )


def commit(
    folder, write_weights, epoch, step=0, metrics=None, jit_choice=None, data=None
):
    """Writes a new generation to `folder`; see the module docstring.

    Args:
        folder: str, the backup folder (made when missing).
        write_weights: callable taking the path of the weights file to write
            (a name ending in `.weights.h5`), such as `model.save_weights`.
        epoch: int, the epochs done.
        step: int, the steps done of the next epoch. Defaults to `0`.
        metrics: a JSON-able list, the epoch's loss-mean state, or `None`.
        jit_choice: bool, what `jit_compile="auto"` chose, or `None`.
        data: the `keras_diffusion.data.identity.identify` of the run's
            data, or `None`.

    Returns:
        The committed `Generation`.
    """
    os.makedirs(folder, exist_ok=True)
    found = generations(folder)
    number = max((g.number for g in found), default=0) + 1
    generation = Generation(
        number,
        f"gen-{number:06d}.weights.h5",
        int(epoch),
        int(step),
        metrics,
        _choice(jit_choice),
        data,
    )
    path = os.path.join(folder, generation.weights)
    write_weights(path)
    files.fsync_file(path)
    files.fsync_folder(folder)  # the weights' name is on the disk before the record
    # The generation kept with it: the newest readable one, the one a resume
    # would have used.
    previous = next(
        (g for g in found if _readable_weights(os.path.join(folder, g.weights))),
        None,
    )
    record = dict(
        generation.record(),
        format=FORMAT_VERSION,
        previous=None if previous is None else previous.record(),
    )
    with files.atomic_write(os.path.join(folder, RECORD_FILE)) as tmp:
        with open(tmp, "w") as f:
            json.dump(record, f)
    prune(folder)
    return generation


def prune(folder):
    """Removes every file of `folder` that its record does not name: older
    generations, an earlier release's files once replaced, and what a commit
    cut short left behind."""
    keep = {RECORD_FILE, *(g.weights for g in generations(folder))}
    record = files.read_json(os.path.join(folder, RECORD_FILE))
    if not (isinstance(record, dict) and "weights" in record):
        # An earlier release's folder, whose record may be the `.bkp` one.
        keep.add(RECORD_FILE + _LEGACY_PREVIOUS)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(folder, name)
        if name not in keep and os.path.isfile(path):
            os.remove(path)


def remove(folder):
    """Removes the backup folder in one atomic step: renamed to a temporary
    name first, so that a kill never leaves part of it."""
    if not os.path.isdir(folder):
        return
    doomed = files.temporary_path(folder)
    os.rename(folder, doomed)
    files.fsync_folder(os.path.dirname(doomed))
    shutil.rmtree(doomed)
