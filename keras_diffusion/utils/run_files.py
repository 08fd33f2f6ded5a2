"""The names of a run folder's files, shared by the run that writes them and
the tools that read them.

`keras_diffusion.run.folder` writes a run folder and says what each file
holds; the evaluation tools read its `config.json`, and a tool given a run
folder finds its model in `model.keras`.
"""

import os

CONFIG_FILE = "config.json"
MODEL_FILE = "model.keras"
SAMPLES_FILE = "samples.png"
DATA_FILE = "data.png"
LOG_FILE = "log.csv"
BACKUP_DIR = "backup"
SAMPLES_DIR = "samples"
TENSORBOARD_DIR = "tensorboard"
CACHE_DIR = "cache"
POSTHOC_DIR = "posthoc_ema"
VOCABULARY_FILE = "vocabulary.json"
PROMPTS_FILE = "prompts.png"
# The prompts of a text run's grids (the rows of samples.png and prompts.png).
RUN_PROMPTS_FILE = "prompts.json"


def is_run_folder(path):
    """Whether `path` is a folder that `scripts/train.py` wrote: its
    `model.keras`, or the `backup/` of a run not finished. (A diffusers
    UNet folder holds a `config.json` too, so that alone does not tell.)"""
    return os.path.isfile(os.path.join(path, MODEL_FILE)) or os.path.isdir(
        os.path.join(path, BACKUP_DIR)
    )


def folder_of(model):
    """The folder a model path stands for: a run folder itself, or the folder
    that holds a `.keras` file (where its run's files and reports go)."""
    path = os.path.abspath(os.fspath(model))
    return path if os.path.isdir(path) else os.path.dirname(path)
