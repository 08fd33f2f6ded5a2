"""TimeEstimate: how long the run will take, said once its steps are timed."""

import time

import keras
import numpy as np

from keras_diffusion.utils.checks import check_int


def format_duration(seconds):
    """`"42 s"`, `"3.5 min"` or `"1.2 h"`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class TimeEstimate(keras.callbacks.Callback):
    """Prints, after the first few steps, how long an epoch and the run take.

    The first compiled call of each epoch is left out of the measurement (it
    holds the tracing, and the start of the data iterator); the next
    `measure_steps` steps time one step. When an epoch is too short for that,
    the second epoch's wall time is used instead. The estimate covers the
    epochs left and `extra_steps` more steps' worth of work after training
    (the final samples, say), and is printed once through `log`.

    Args:
        epochs: int, the epochs of the run.
        steps_per_epoch: int, optimizer steps an epoch.
        extra_steps: float, work after training in training steps.
            Defaults to `0`.
        measure_steps: int, steps to time. Defaults to `5`.
        log: callable taking one message string. Defaults to `print`.
    """

    # Counts steps from the batch index, which a call's hook reports.
    per_call_batch_hooks = True

    def __init__(
        self, epochs, steps_per_epoch, extra_steps=0.0, measure_steps=5, log=print
    ):
        super().__init__()
        self.epochs = check_int("epochs", epochs, 1)
        self.steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch, 1)
        self.extra_steps = float(extra_steps)
        self.measure_steps = check_int("measure_steps", measure_steps, 1)
        self.log = log
        self.message = None
        self._epoch = 0
        self._epochs_seen = 0
        self._mark = None
        self._epoch_start = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._mark = None
        self._epoch_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.message is not None:
            return
        steps = batch + 1
        # Reading the loss waits for the step, so the clock sees finished work.
        for value in (logs or {}).values():
            np.asarray(value)
        now = time.perf_counter()
        if self._mark is None:
            self._mark = (steps, now)
            return
        measured = steps - self._mark[0]
        if measured >= min(self.measure_steps, self.steps_per_epoch - self._mark[0]):
            self._report((now - self._mark[1]) / measured, steps)

    def on_epoch_end(self, epoch, logs=None):
        self._epochs_seen += 1
        if self.message is None and self._epochs_seen >= 2:
            elapsed = time.perf_counter() - self._epoch_start
            self._report(elapsed / self.steps_per_epoch, self.steps_per_epoch)

    def _report(self, step_seconds, steps_done):
        steps_left = self.steps_per_epoch * (self.epochs - self._epoch) - steps_done
        training = step_seconds * steps_left
        after = step_seconds * self.extra_steps
        self.message = (
            f"Time estimate: {format_duration(step_seconds * self.steps_per_epoch)} "
            f"an epoch ({step_seconds * 1000:.0f} ms a step, {self.steps_per_epoch} "
            f"steps); about {format_duration(training)} of training left and "
            f"{format_duration(after)} for the final samples: done in about "
            f"{format_duration(training + after)}."
        )
        self.log(self.message)
