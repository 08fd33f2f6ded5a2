"""A training run as a function: the application built on the library.

- `config`: `TrainConfig`, every setting of a run (`process_config`: its
  process, `--process`, `--beta-schedule`, `--schedule`, and the sampler's
  fit to it; `init_from`: a checkpoint's model and settings).
- `build`: the run's parts (schedule, data, autoencoder, compiled model).
- `folder`: the run folder, its files and where a run resumes.
- `training`: `train(config)`, what `scripts/train.py` runs.
- `preemption`: step backups, SIGTERM/SIGINT, `fit_resumable`.
- `backup_folder`: the backup's generations, each committed in one atomic step.
- `generation`: sampling a saved model to files (`scripts/sample.py`).
- `cli`: what the scripts share (flags, one-line errors).
"""

from keras_diffusion.run.config import TrainConfig
from keras_diffusion.run.training import train

__all__ = ["TrainConfig", "train"]
