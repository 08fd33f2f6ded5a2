"""`steps_per_execution="auto"`: how many training steps a compiled call runs.

Between two compiled calls `fit` does Python work (the epoch loop, the
callbacks, the next call's dispatch): a few ms a call on a 2-core CPU. On
the digits U-Net's 35 ms step, 8 steps a call trained 1.04-1.13x faster
than one (docs/benchmarks.md, "Steps a call"); on a long step the same few
ms change nothing. In graph mode on a CPU it measured no faster, so there
"auto" keeps one step a call.

What running several steps a call changes for the user is the callbacks:
Keras calls their batch hooks once a call, with the call's last batch
index. So "auto" runs several steps a call only when no callback needs
every step: none overrides a batch hook, or each that does is known to work
once a call (Keras' progress bar and history, `TerminateOnNaN`, checkpoints
and backups saved by epoch, TensorBoard logging by epoch without profiling,
and this library's callbacks that declare `per_call_batch_hooks = True`).
"""

import math

import keras
import numpy as np
import tensorflow as tf

from keras_diffusion.utils import keras_internals

# Steps a compiled call runs under "auto": enough to cut `fit`'s work
# between calls to a few percent of a short step, few enough that progress
# and callbacks still report often on a long one.
AUTO_STEPS_PER_EXECUTION = 8
# In graph mode on a CPU (no XLA, no GPU) "auto" means one step a call: there
# 8 a call measured no faster on the default digits run (110 s against
# 104 s, 115-119 ms a step either way) and its first epoch traced 3 s longer.
AUTO_STEPS_GRAPH_MODE_CPU = 1
# The longest a call's steps run under "auto" when their time is known: a
# 9 s step of the tutorial's U-Net on a CPU would otherwise update the
# progress bar once every 75 s.
MAX_CALL_SECONDS = 2.0

_BATCH_HOOKS = (
    "on_batch_begin",
    "on_batch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
)


def _per_call_safe(callback):
    """Whether `callback`'s batch hooks work when called once a call."""
    if getattr(callback, "per_call_batch_hooks", False):
        return True
    base = keras.callbacks.Callback
    if all(getattr(type(callback), h) is getattr(base, h) for h in _BATCH_HOOKS):
        return True
    if isinstance(
        callback,
        (
            keras.callbacks.ProgbarLogger,
            keras.callbacks.History,
            keras.callbacks.TerminateOnNaN,
        ),
    ):
        return True
    if isinstance(
        callback, (keras.callbacks.ModelCheckpoint, keras.callbacks.BackupAndRestore)
    ):
        return callback.save_freq == "epoch"
    if isinstance(callback, keras.callbacks.TensorBoard):
        profiling = keras_internals.tensorboard_profiles(callback)
        return callback.update_freq == "epoch" and not profiling
    return False


def epoch_steps(x, batch_size=None, steps_per_epoch=None, validation_split=0.0):
    """The steps an epoch of `fit(x, ...)` has, or `None` when not known.

    `steps_per_epoch` when given; else the cardinality of a finite
    `tf.data.Dataset` (or of a distributed one), the `num_batches` of a
    `keras.utils.PyDataset`, or the batches of an array (after
    `validation_split`, as Keras splits it).
    """
    if steps_per_epoch is not None:
        return int(steps_per_epoch)
    if isinstance(x, tf.data.Dataset):
        cardinality = int(x.cardinality())
        return cardinality if cardinality > 0 else None
    if isinstance(x, tf.distribute.DistributedDataset):
        cardinality = int(x.cardinality)  # a property here
        return cardinality if cardinality > 0 else None
    if isinstance(x, keras.utils.PyDataset):
        return x.num_batches
    if isinstance(x, np.ndarray) or tf.is_tensor(x):
        examples = int(x.shape[0])
        if validation_split:
            examples = int(math.floor(examples * (1.0 - validation_split)))
        return max(1, -(-examples // int(batch_size or 32)))
    return None


def auto_steps_per_execution(
    steps_per_epoch=None, callbacks=None, xla=True, gpu=False, step_seconds=None
):
    """The steps a call for `compile(steps_per_execution="auto")` and a `fit`.

    Args:
        steps_per_epoch: the steps of an epoch (`epoch_steps`), or `None`.
            Keras runs whole calls and counts its progress bar in them, so a
            number that does not divide the epoch would train past a
            `steps_per_epoch` (9 asked, 16 run) and show more steps than the
            epoch has (16/14): the largest divisor up to
            `AUTO_STEPS_PER_EXECUTION` is used.
        callbacks: `fit`'s list (or `keras.callbacks.CallbackList`), or
            `None`. One that needs every step's batch hooks means 1.
        xla: bool, whether the step is compiled with XLA.
        gpu: bool, whether a GPU runs it. Without either,
            `AUTO_STEPS_GRAPH_MODE_CPU`.
        step_seconds: float, a step's measured time, or `None`: a call
            runs no more steps than fit in `MAX_CALL_SECONDS` (at least
            one), so a slow step still shows its progress often.

    Returns:
        An int in `[1, AUTO_STEPS_PER_EXECUTION]`.
    """
    callbacks = getattr(callbacks, "callbacks", callbacks) or ()
    if not all(_per_call_safe(c) for c in callbacks):
        return 1
    steps = AUTO_STEPS_PER_EXECUTION if xla or gpu else AUTO_STEPS_GRAPH_MODE_CPU
    if step_seconds is not None:
        steps = max(1, min(steps, int(MAX_CALL_SECONDS / step_seconds)))
    if steps_per_epoch is None:
        return steps
    return max(d for d in range(1, steps + 1) if int(steps_per_epoch) % d == 0)
