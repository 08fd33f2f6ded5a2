"""StopOnNonFiniteLoss: `TerminateOnNaN(raise_error=True)`, with a message that
says what to try; it stops before the epoch-end checkpoints could save diverged
weights.
"""

import keras
import numpy as np


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; raised by `StopOnNonFiniteLoss`."""


class StopOnNonFiniteLoss(keras.callbacks.TerminateOnNaN):
    """Stops `fit` at the first non-finite loss, before any checkpoint is saved.

    `keras.callbacks.TerminateOnNaN(raise_error=True)`, raising
    `NonFiniteLossError` with a message that names the epoch and step and the
    likely causes. Raising, rather than setting `model.stop_training`, keeps
    `fit` from running `on_epoch_end`, whose checkpoints and backups would
    save the diverged weights. Put it first in the list of callbacks.
    """

    # Checks the loss each compiled call: the epoch's mean loss stays
    # non-finite once a step made it so (`steps_per_execution="auto"`).
    per_call_batch_hooks = True

    def __init__(self):
        super().__init__(raise_error=True)
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_batch_end(self, batch, logs=None):
        try:
            super().on_batch_end(batch, logs)
        except RuntimeError as error:
            raise NonFiniteLossError(self._message(batch, logs["loss"])) from error

    def _message(self, batch, loss):
        loss = float(np.asarray(loss))
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        policy = keras.mixed_precision.global_policy().name
        lr = getattr(self.model.optimizer, "learning_rate", None)
        try:
            lr = f"{float(keras.ops.convert_to_numpy(lr)):g}"
        except (TypeError, ValueError):
            lr = "a schedule"
        calls = int(getattr(self.model, "steps_per_execution", 1) or 1)
        where = f"step {batch + 1}"
        if calls > 1:  # the hook sees the last step of each compiled call
            where = f"by step {batch + 1} (one compiled call runs {calls} steps)"
        return (
            f"The loss became {loss} in epoch {self._epoch + 1}, {where} "
            f"(optimizer step {step}); training stopped and the last good "
            "checkpoint is kept. Likely causes: a learning rate too high (it is "
            f"{lr}; try 3-10x lower), mixed precision (policy {policy!r}) without "
            "loss scaling (use the 'mixed_float16' policy, whose compile wraps "
            "the optimizer in a LossScaleOptimizer, or 'bfloat16'), or "
            "non-finite input images."
        )
