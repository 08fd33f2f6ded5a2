"""Step-level backups, and a clean stop on SIGTERM / SIGINT that resumes exactly.

`StepBackup` writes the resume state to `backup/` at every epoch end, with
`every_steps` every so many optimizer steps, and with `every_seconds` at the
first step boundary once so much time has passed since the last write (both
counted on the host: nothing is read from the device between writes): the
weights (model, EMA, optimizer slots, the noise seed state; of a LoRA
model, the factors and a checksum of the frozen kernels), the epochs
done, the steps done of the current epoch and the state of the epoch's loss
mean. Each write commits a new generation in one atomic step, and a restore
reads the newest complete one (`keras_diffusion.run.backup_folder`): a kill
at any point leaves a whole backup.

`stop_on_signals()` turns the first SIGTERM or SIGINT into a request; the
handler only records it. `StepBackup` honours it at the next step boundary
(at most one compiled call later: the signal is seen between calls): it
says so in one line, writes the backup and raises `Preempted`, whose message
says where the run stopped and how to resume; `scripts/train.py` then exits
with `EXIT_PREEMPTED`. A second signal exits at once (status 128 + the
signal number), as an unhandled one would.

`fit_resumable` runs `fit` from the backup: a resume in the middle of an
epoch first trains the rest of that epoch, on the batches the interrupted
run had not reached (`keras_diffusion.data.ordered`), with the epoch's
loss mean restored, then the remaining epochs: the losses and weights equal
an uninterrupted run's.
"""

import contextlib
import os
import signal
import threading
import time

import keras
import numpy as np

from keras_diffusion.adapters import lora
from keras_diffusion.data import identity
from keras_diffusion.run import backup_folder
from keras_diffusion.utils.checks import check_float, check_int, is_int, is_number

# The exit status of a run stopped by SIGTERM or SIGINT with its resume state
# written (EX_TEMPFAIL of sysexits.h: "try again later").
EXIT_PREEMPTED = 75
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """The run stopped on a signal after writing its resume state."""


class StopRequest:
    """Whether, and by which signal, a stop was asked for.

    Args:
        log: callable taking one message string, or `None`: where `announce`
            says that the stop was seen. Defaults to `None`.
    """

    def __init__(self, log=None):
        self.signal_name = None
        self.log = log
        self._announced = False

    def request(self, name="a stop request"):
        self.signal_name = name

    @property
    def requested(self):
        return self.signal_name is not None

    def announce(self):
        """Says once that the stop was seen; called at a step boundary (never
        in the signal handler, which may interrupt a progress bar's write)."""
        if not self.requested or self._announced:
            return
        self._announced = True
        if self.log is not None:
            self.log(
                f"\n{self.signal_name}: writing the resume state; send it again "
                "to exit at once, without it."
            )


@contextlib.contextmanager
def stop_on_signals(log=print):
    """Yields a `StopRequest` set by the first SIGTERM/SIGINT while inside.

    The handler only records the request (its line is logged at the next
    step boundary, by `StopRequest.announce`); a second signal exits at once.
    Outside the main thread (where Python cannot handle signals) the request
    is only set by `StopRequest.request`. The previous handlers come back on
    exit.
    """
    stop = StopRequest(log)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum, frame):
        name = signal.Signals(signum).name
        if stop.requested:
            # One unbuffered write: no Python stream is re-entered.
            os.write(2, f"\n{name} again: exiting now, without a backup.\n".encode())
            os._exit(128 + signum)
        stop.request(name)

    previous = {s: signal.signal(s, handle) for s in _SIGNALS}
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def check_backup_intervals(every_steps, every_minutes):
    """Raises a `ValueError` naming the argument (and its `scripts/train.py`
    flag) unless `every_steps` is an int >= 1 or `None` and `every_minutes`
    a finite number > 0 or `None`."""
    if every_steps is not None and (not is_int(every_steps) or every_steps < 1):
        raise ValueError(
            "Argument `backup_every_steps` (--backup-every-steps) must be a "
            f"positive number of steps. Received: backup_every_steps={every_steps!r}"
        )
    if every_minutes is not None and (
        not is_number(every_minutes)
        or not np.isfinite(every_minutes)
        or every_minutes <= 0
    ):
        raise ValueError(
            "Argument `backup_every_minutes` (--backup-every-minutes) must be a "
            "positive number of minutes. Received: "
            f"backup_every_minutes={every_minutes!r}"
        )


class StepBackup(keras.callbacks.Callback):
    """Writes the resume state every epoch, every `every_steps` steps, and on
    a stop request; see the module docstring.

    Args:
        backup_dir: str, the backup folder.
        every_steps: int or `None`, also back up every so many steps.
            Defaults to `None`.
        every_seconds: number or `None`, also back up at the first step
            boundary once this much time has passed since the last backup
            (or the start). Defaults to `None`.
        stop: a `StopRequest`, or `None`. Defaults to `None`.
        data: the `keras_diffusion.data.identity.identify` of the data, or
            `None`: written with each backup; a backup taken in the middle
            of an epoch of other data restarts that epoch (see `restore`).
            Defaults to `None`.
    """

    per_call_batch_hooks = True

    def __init__(
        self, backup_dir, every_steps=None, stop=None, every_seconds=None, data=None
    ):
        super().__init__()
        self.backup_dir = os.fspath(backup_dir)
        if every_steps is not None:
            check_int("every_steps", every_steps, minimum=1)
        self.every_steps = every_steps
        if every_seconds is not None:
            every_seconds = check_float("every_seconds", every_seconds, greater_than=0)
        self.every_seconds = every_seconds
        self.stop = stop
        self.data = data
        self.data_changed = False
        self.step_offset = 0
        self.metric_state = None
        self._epoch = 0
        self._seen = 0  # steps of the current epoch seen by this callback
        self._since_saved = 0  # steps trained since the last backup
        self._saved_at = time.monotonic()

    def on_train_begin(self, logs=None):
        self._saved_at = time.monotonic()
        # From here on the run folder holds an unfinished run, even when a
        # kill comes before the first backup but after a `model.keras`
        # checkpoint (`keras_diffusion.run.folder.RunFolder.state`).
        os.makedirs(self.backup_dir, exist_ok=True)

    def restore(self):
        """Loads the newest complete backup into the model; returns
        `(epoch, step)` (0, 0 without one) and keeps the loss state for
        `on_epoch_begin`.

        A backup in the middle of an epoch of data other than `self.data`
        (files added, removed or renamed) cannot continue that epoch: its
        positions name other images. The weights are restored and `step` is
        0, so the epoch starts again on the new data; `data_changed` says so.

        Raises:
            ValueError: the backup's weights are damaged (both generations).
        """
        generation = backup_folder.newest(self.backup_dir)
        if generation is None:
            return 0, 0
        self.metric_state = generation.metrics
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        with lora.base_kernels_by_checksum() as mismatched:
            self.model.load_weights(os.path.join(self.backup_dir, generation.weights))
        lora.check_base_unchanged(mismatched)
        if generation.jit_choice is not None and hasattr(self.model, "set_jit_choice"):
            # XLA or not as the interrupted run measured it, not measured
            # again on the steps left (other numerics).
            self.model.set_jit_choice(generation.jit_choice)
        self.data_changed = identity.changed(generation.data, self.data)
        if self.data_changed:
            return generation.epoch, 0
        return generation.epoch, generation.step

    def _steps_done(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._seen = 0
        if self.step_offset and self.metric_state is not None:
            # The interrupted epoch's loss mean so far, after fit's reset.
            variables = [v for m in self.model.metrics for v in m.variables]
            for variable, value in zip(variables, self.metric_state, strict=True):
                variable.assign(np.asarray(value, variable.dtype))

    def _stop_requested(self):
        return self.stop is not None and self.stop.requested

    def _preempted(self, epoch, step):
        return Preempted(
            f"Stopped by {self.stop.signal_name} in epoch {epoch + 1}, after step "
            f"{step} of the epoch (optimizer step {self._steps_done()}); the "
            f"resume state is in {self.backup_dir}. Run the same command again "
            "to resume from there."
        )

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last step of the compiled call just ended; Keras
        # numbers a last, partial call as if it were whole.
        epoch_steps = (self.params or {}).get("steps")
        done = batch + 1 if epoch_steps is None else min(batch + 1, epoch_steps)
        self._since_saved += done - self._seen
        self._seen = done
        if epoch_steps is not None and done >= epoch_steps:
            return  # the epoch is done: `on_epoch_end` writes (and stops)
        step = self.step_offset + done
        if self._stop_requested():
            self.stop.announce()
            self.save(self._epoch, step)
            raise self._preempted(self._epoch, step)
        if (self.every_steps and self._since_saved >= self.every_steps) or (
            self.every_seconds is not None
            and time.monotonic() - self._saved_at >= self.every_seconds
        ):
            self.save(self._epoch, step)

    def on_epoch_end(self, epoch, logs=None):
        # The steps seen, not `params["steps"]`: `None` for data of unknown
        # length.
        steps = self.step_offset + self._seen
        self.step_offset = 0
        if self._stop_requested():
            self.stop.announce()
        self.save(epoch + 1, 0)
        if self._stop_requested():
            raise self._preempted(epoch, steps)

    def save(self, epoch, step):
        """Commits the backup of `epoch` epochs and `step` more steps."""
        self._since_saved = 0
        metrics = [
            np.asarray(v).tolist() for m in self.model.metrics for v in m.variables
        ]
        backup_folder.commit(
            self.backup_dir,
            self._write_weights,
            epoch,
            step,
            metrics,
            jit_choice=getattr(self.model, "jit_choice", None),
            data=self.data,
        )
        self._saved_at = time.monotonic()

    def _write_weights(self, path):
        # A LoRA model's base weights are rebuilt by the resumed run from its
        # source; the backup holds their checksum (`lora`).
        with lora.base_kernels_by_checksum():
            self.model.save_weights(path, overwrite=True)


def fit_resumable(
    model, dataset, order, epochs, backup, callbacks=(), last_callbacks=(), **kwargs
):
    """`model.fit` over `dataset.epoch_batches`, resumed from `backup`.

    Args:
        model: a compiled model.
        dataset: a dataset with `epoch_batches(order, skip=0)`
            (`keras_diffusion.data` loaders give one), or any `fit` input
            when `order` is `None`: a resume then restarts the epoch it
            stopped in.
        order: the `keras_diffusion.data.ordered.EpochOrder` of the batches,
            or `None`.
        epochs: int, the run's epochs.
        backup: `StepBackup`, also given the model here.
        callbacks: the other callbacks, run before `backup`.
        last_callbacks: callbacks of the last `fit` only (a mid-epoch resume
            runs two: the rest of the epoch, then the other epochs), such as
            checks at the end of training.
        **kwargs: more arguments of `fit`.

    Returns:
        `(initial_epoch, initial_step)`: where the run started.
    """
    backup.set_model(model)
    epoch, step = backup.restore()
    start = (epoch, step)
    if order is None:
        step = 0  # cannot skip into an epoch: train it again from its start
    # The backup last: the other callbacks see a step (a non-finite loss, an
    # epoch's log row) before it is saved.
    first = (
        [*callbacks, backup]
        if order is None
        else [order.callback(), *callbacks, backup]
    )
    if step and epoch < epochs:
        backup.step_offset = step
        rest = dataset.epoch_batches(order, skip=step)
        measure = getattr(model, "measure_jit_compile", None)
        left = int(rest.cardinality())
        if measure is not None and left > 0:
            # XLA or not for the whole rest of the run, not the partial epoch.
            measure(
                rest,
                run_steps=left + (left + step) * (epochs - epoch - 1),
                epoch_steps=left + step,
                callbacks=first,
                verbose=kwargs.get("verbose", "auto"),
            )
        # The rest of one epoch is a fit of its own: its bar counts the
        # run's epochs (Epoch 2/4), not that fit's (2/2).
        bar = [] if kwargs.get("verbose") == 0 else [_RunProgbar(epochs)]
        model.fit(
            rest,
            initial_epoch=epoch,
            epochs=epoch + 1,
            callbacks=bar
            + (first if epoch + 1 < epochs else first + list(last_callbacks)),
            **kwargs,
        )
        epoch += 1
    if epoch < epochs:
        model.fit(
            dataset if order is None else dataset.epoch_batches(order),
            initial_epoch=epoch,
            epochs=epochs,
            callbacks=first + list(last_callbacks),
            **kwargs,
        )
    return start


class _RunProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, numbering the epochs of a whole run of `epochs`."""

    def __init__(self, epochs):
        super().__init__()
        self.run_epochs = epochs

    def set_params(self, params):
        super().set_params(params)
        self.epochs = self.run_epochs
