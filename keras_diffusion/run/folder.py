"""Run folders: what a training run writes, and whether to start or resume.

A run folder holds:

- `config.json`: every setting used (written when training starts);
- `log.csv`: one row per epoch (`keras.callbacks.CSVLogger`);
- `backup/`: the resume state (`keras_diffusion.run.preemption.StepBackup`):
  weights (model, EMA, optimizer slots, the noise seed state), the epochs
  and steps done, in generations committed atomically
  (`keras_diffusion.run.backup_folder`); made when training starts, kept
  while the run is unfinished and removed (in one rename) once the final
  outputs are written;
- `model.keras`: the whole `DiffusionModel` (saved every `checkpoint_every`
  epochs and at the end, always through a temporary file and a rename);
- `data.png`: a grid of one training batch as the model sees it (after all
  preprocessing), written at the start of every run;
- `samples.png`: a grid of EMA samples from the final model (one row per
  class for a class-conditional model);
- `vocabulary.json`, `prompts.json` (written just before `config.json`) and
  `prompts.png`: a text run's vocabulary, its grids' prompts and their grid
  (`keras_diffusion.run.text`);
- `tensorboard/`, `samples/`: only with `tensorboard` / `sample_every`;
- `posthoc_ema/`: only with `posthoc_ema`, the snapshots of its EMA profiles
  (`keras_diffusion.averages.posthoc`), kept after the run;
- `cache/`: an image folder's decode cache (`--cache-dir auto`, the
  default); not a run's own file: `overwrite` keeps it, and a folder holding
  only it counts as empty (a build interrupted before the run started).

A folder with `backup/` (or with `config.json` and no `model.keras`) holds an
interrupted run: the same settings resume it. A folder with `model.keras` and
no `backup/` holds a finished run, replaced only with `overwrite=True`.

Every file is written atomically (`keras_diffusion.utils.files`), so a kill
at any point leaves whole files and perhaps a writer's temporaries, which no
state counts (a folder holding only them and the cache is empty) and which
`remove_leftovers` clears before a run writes.
"""

import csv
import dataclasses
import json
import os
import shutil

from keras_diffusion.run import backup_folder
from keras_diffusion.utils import files
from keras_diffusion.utils.run_files import (
    BACKUP_DIR,
    CACHE_DIR,
    CONFIG_FILE,
    DATA_FILE,
    LOG_FILE,
    MODEL_FILE,
    POSTHOC_DIR,
    PROMPTS_FILE,
    RUN_PROMPTS_FILE,
    SAMPLES_DIR,
    SAMPLES_FILE,
    TENSORBOARD_DIR,
    VOCABULARY_FILE,
)

_RUN_ENTRIES = (
    CONFIG_FILE,
    MODEL_FILE,
    SAMPLES_FILE,
    DATA_FILE,
    LOG_FILE,
    VOCABULARY_FILE,
    PROMPTS_FILE,
    RUN_PROMPTS_FILE,
)
_RUN_DIRS = (BACKUP_DIR, SAMPLES_DIR, TENSORBOARD_DIR, POSTHOC_DIR)


@dataclasses.dataclass
class RunFolder:
    """Paths and state of a run folder; see the module docstring."""

    path: str

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def backup_dir(self):
        return self.file(BACKUP_DIR)

    def state(self):
        """`"empty"`, `"finished"`, `"interrupted"` or `"foreign"`.

        The decode cache and writers' temporaries do not count.
        """
        if not os.path.isdir(self.path):
            return "empty"
        names = {n for n in os.listdir(self.path) if not files.is_temporary(n)}
        # A text run's vocabulary and prompts, written just before config.json.
        if not names - {CACHE_DIR, VOCABULARY_FILE, RUN_PROMPTS_FILE}:
            return "empty"
        if os.path.isdir(self.backup_dir):
            return "interrupted"
        if MODEL_FILE in names:
            return "finished"
        if CONFIG_FILE in names:
            return "interrupted"
        return "foreign"

    def read_config(self):
        return files.read_json(self.file(CONFIG_FILE))

    def resume_point(self):
        """`(epochs, steps)` the backup holds: the epochs done and the steps
        done of the next one (`(0, 0)` without a backup).

        Raises:
            ValueError: the backup's weights are damaged (both generations).
        """
        generation = backup_folder.newest(self.backup_dir)
        return (0, 0) if generation is None else (generation.epoch, generation.step)

    def backup_data(self):
        """What identified the data of the newest backup
        (`keras_diffusion.data.identity`), or `None`."""
        generation = backup_folder.newest(self.backup_dir)
        return None if generation is None else generation.data

    def check_backup(self):
        """Makes sure a backup, if any, can be read before resuming.

        Raises:
            ValueError: no generation of the backup has readable weights.
        """
        backup_folder.newest(self.backup_dir)

    def remove_leftovers(self):
        """Removes what writers killed mid-write left (temporaries in the run
        folder and `samples/`, uncommitted backup files); returns nothing."""
        for folder in (
            self.path,
            self.file(SAMPLES_DIR),
            self.file(POSTHOC_DIR),
            self.backup_dir,
        ):
            files.remove_temporaries(folder)
        backup_folder.prune(self.backup_dir)

    def remove_backup(self):
        """Removes `backup/` in one step: the run is finished from then on."""
        backup_folder.remove(self.backup_dir)

    def clear(self):
        """Removes this run's own files (nothing else in the folder)."""
        for name in _RUN_ENTRIES + _RUN_DIRS:
            target = self.file(name)
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target):
                os.remove(target)

    def write_config(self, config_dict):
        with files.atomic_write(self.file(CONFIG_FILE)) as tmp:
            with open(tmp, "w") as f:
                json.dump(config_dict, f, indent=2, sort_keys=True)
                f.write("\n")

    def trim_log(self, epochs):
        """Keeps the CSV log's rows of the first `epochs` epochs (0-based < epochs)."""
        path = self.file(LOG_FILE)
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows:
            return
        kept = [rows[0]] + [
            row for row in rows[1:] if row and row[0].isdigit() and int(row[0]) < epochs
        ]
        with files.atomic_write(path) as tmp:
            with open(tmp, "w", newline="") as f:
                csv.writer(f).writerows(kept)

    def resume_message(self, initial_epoch, epochs, initial_step=0):
        """What resuming from `initial_epoch` of `epochs` does, in one line."""
        if initial_step and initial_epoch < epochs:
            return (
                f"Resuming the interrupted run in {self.path} in epoch "
                f"{initial_epoch + 1}/{epochs} after step {initial_step} "
                f"({initial_epoch} epochs and {initial_step} steps restored "
                "from backup/)."
            )
        if initial_epoch >= epochs:
            return (
                f"Resuming the run in {self.path}: all {epochs} epochs are "
                "done; writing the final outputs."
            )
        if initial_epoch > 0:
            return (
                f"Resuming the interrupted run in {self.path} from epoch "
                f"{initial_epoch + 1}/{epochs} ({initial_epoch} epochs "
                "restored from backup/)."
            )
        return (
            f"The run in {self.path} was interrupted before its first epoch "
            "ended; starting again from epoch 1."
        )


def _differences(saved, current):
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: {saved.get(k)!r} -> {current.get(k)!r}"
        for k in keys
        if saved.get(k) != current.get(k)
    ]


def prepare_run_folder(output_dir, config_dict, overwrite=False, upgrade=None):
    """Checks `output_dir` against the run about to start; changes nothing
    (but the temporaries a kill left in a finished run's folder: a backup
    renamed away and not yet removed).

    `upgrade`, given, turns the folder's config.json of an earlier release
    into what this one records for the same run before they are compared.

    Returns:
        `(run_folder, resume)`: whether an interrupted run is resumed.

    Raises:
        ValueError: the folder holds a finished run, an interrupted run with
            other settings, or unrelated files, and `overwrite` is False.
    """
    run = RunFolder(os.fspath(output_dir))
    if os.path.exists(run.path) and not os.path.isdir(run.path):
        raise ValueError(
            "Argument `output_dir` (--output-dir) must be a folder. "
            f"Received: output_dir={run.path!r}, an existing file"
        )
    state = run.state()
    if overwrite or state == "empty":
        return run, False
    if state == "finished":
        files.remove_temporaries(run.path)
        raise ValueError(
            f"The output folder {run.path!r} holds a finished run ({MODEL_FILE}); "
            "pass --overwrite (overwrite=True) to replace it, or choose another "
            "--output-dir."
        )
    if state == "foreign":
        raise ValueError(
            f"The output folder {run.path!r} is not empty and holds no run "
            f"({CONFIG_FILE}); choose another --output-dir, or pass --overwrite "
            "(overwrite=True) to write into it anyway."
        )
    saved = run.read_config()
    if upgrade is not None:
        saved = upgrade(saved)
    if saved is None or saved != config_dict:
        changed = _differences(saved or {}, config_dict)
        raise ValueError(
            f"The output folder {run.path!r} holds an interrupted run with other "
            f"settings ({'; '.join(changed[:6]) or 'unreadable config.json'}); "
            "rerun with the same flags to resume it, or pass --overwrite "
            "(overwrite=True) to start again."
        )
    return run, True


def resolve_cache_dir(cache_dir, config, output_dir):
    """The decode cache folder of a run: `"auto"` is `<output_dir>/cache` for
    an image folder, `"none"` (or `None`) decodes into memory."""
    if cache_dir is None or cache_dir == "none" or config.dataset != "folder":
        return None
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(
            "Argument `cache_dir` (--cache-dir) must be a folder, 'auto' or "
            f"'none'. Received: cache_dir={cache_dir!r}"
        )
    if cache_dir == "auto":
        return os.path.join(os.fspath(output_dir), CACHE_DIR)
    return os.fspath(cache_dir)
