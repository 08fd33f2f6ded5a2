"""Callbacks for `DiffusionModel.fit`: sample grids, KID, crash-safe checkpoints.

Keras' own callbacks serve the rest of a run and are used as they are:
`CSVLogger`, `TensorBoard`; the resume state is
`keras_diffusion.run.preemption.StepBackup`'s, which, unlike
`keras.callbacks.BackupAndRestore`, resumes in the middle of an epoch.
"""

from keras_diffusion.callbacks.checkpoint import AtomicModelCheckpoint
from keras_diffusion.callbacks.kid import KIDCallback
from keras_diffusion.callbacks.non_finite import NonFiniteLossError, StopOnNonFiniteLoss
from keras_diffusion.callbacks.posthoc_snapshots import PosthocSnapshots
from keras_diffusion.callbacks.progress import TimeEstimate, format_duration
from keras_diffusion.callbacks.sample_grid import SampleGrid

__all__ = [
    "AtomicModelCheckpoint",
    "KIDCallback",
    "NonFiniteLossError",
    "PosthocSnapshots",
    "SampleGrid",
    "StopOnNonFiniteLoss",
    "TimeEstimate",
    "format_duration",
]
