"""The names of a run folder's files, shared by the run that writes them and
the tools that read them.

`keras_diffusion.run.folder` writes a run folder and says what each file
holds; the evaluation tools read its `config.json`, and a tool given a run
folder finds its model in `model.keras`.
"""

CONFIG_FILE = "config.json"
MODEL_FILE = "model.keras"
SAMPLES_FILE = "samples.png"
DATA_FILE = "data.png"
LOG_FILE = "log.csv"
BACKUP_DIR = "backup"
SAMPLES_DIR = "samples"
TENSORBOARD_DIR = "tensorboard"
CACHE_DIR = "cache"
