"""Callbacks for `DiffusionModel.fit`: sample grids, KID, crash-safe checkpoints.

Keras' own callbacks serve the rest of a run and are used as they are:
`CSVLogger`, `TensorBoard`; the resume state is
`keras_diffusion.preemption.StepBackup`'s, which, unlike
`keras.callbacks.BackupAndRestore`, resumes in the middle of an epoch.
`ModelCheckpoint` is replaced because it writes the `.keras` file in place
(a kill mid-write leaves a truncated file): `AtomicModelCheckpoint` writes
a temporary file and renames it.
`StopOnNonFiniteLoss` is `TerminateOnNaN(raise_error=True)`, which stops
before the epoch-end checkpoints could save diverged weights, with a message
that says what to try.
"""

import math
import os
import time

import keras
import numpy as np

from keras_diffusion import files
from keras_diffusion import images as images_lib
from keras_diffusion.checks import check_int


class SampleGrid(keras.callbacks.Callback):
    """Writes a PNG grid of EMA samples from a fixed seed every `every` epochs.

    The same seed (and labels) every time, so successive grids show the same
    noise turning into digits, not new draws. The PNG is written to a
    temporary file and renamed, so a crash never leaves a truncated image.
    For a class-conditional model the default labels give one row per class.

    Args:
        filepath: str, where to write; may contain `{epoch}` (1-based), e.g.
            `"samples/epoch_{epoch:04d}.png"`.
        num_images: int, images in the grid. Defaults to `64`.
        every: int, write after every `every`-th epoch. Defaults to `1`.
        seed: int, the sampling seed. Defaults to `0`.
        sampler: a `keras_diffusion.samplers` sampler, or `None` for the
            model's default (DDIM, 50 steps). Defaults to `None`.
        labels: optional labels for a conditional model; `None` gives rows of
            classes `0, 1, ...` (see `keras_diffusion.images.class_rows`).
            Defaults to `None`.
        guidance_scale: float, classifier-free guidance weight. Defaults to
            `1.0`.
        rows: int or `None`; `None` uses one row per class for a conditional
            model and a square grid otherwise. Defaults to `None`.
        log_dir: optional str; when given, the grid is also written to
            TensorBoard there (`tf.summary.image`, tag `samples`).
            Defaults to `None`.

    Example:

    ```python
    model.fit(ds, epochs=20, callbacks=[SampleGrid("run/grid_{epoch}.png", every=5)])
    ```
    """

    def __init__(
        self,
        filepath,
        num_images=64,
        every=1,
        seed=0,
        sampler=None,
        labels=None,
        guidance_scale=1.0,
        rows=None,
        log_dir=None,
    ):
        super().__init__()
        if not isinstance(filepath, (str, os.PathLike)):
            raise TypeError(
                f"Argument `filepath` must be a path. Received: filepath={filepath!r}"
            )
        self.filepath = os.fspath(filepath)
        self.num_images = check_int("num_images", num_images, 1)
        self.every = check_int("every", every, 1)
        self.seed = seed
        self.sampler = sampler
        self.labels = labels
        self.guidance_scale = guidance_scale
        self.rows = rows
        self.log_dir = log_dir
        self._writer = None

    def _labels_and_rows(self):
        if self.labels is not None:
            return self.labels, self.rows
        num_classes = getattr(self.model, "num_classes", None)
        labels, rows = images_lib.class_rows(num_classes, self.num_images)
        return labels, (rows if self.rows is None else self.rows)

    def generate(self):
        """The grid's images, `(num_images, H, W, C)` in [-1, 1]."""
        labels, _ = self._labels_and_rows()
        kwargs = {}
        if labels is not None:
            kwargs = {"labels": labels, "guidance_scale": self.guidance_scale}
        return self.model.generate(
            self.num_images if labels is None else len(labels),
            sampler=self.sampler,
            seed=self.seed,
            verbose=0,
            **kwargs,
        )

    def write(self, epoch=None, filepath=None):
        """Samples and writes the grid now; returns the path written.

        Args:
            epoch: int, the 1-based epoch for `{epoch}` and TensorBoard's step.
            filepath: optional path overriding `self.filepath`.
        """
        _, rows = self._labels_and_rows()
        samples = self.generate()
        path = (filepath or self.filepath).format(epoch=epoch or 0)
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        grid = images_lib.save_grid(samples, path, rows=rows)
        if self.log_dir is not None:
            self._log_image(grid, epoch or 0)
        return path

    def _log_image(self, grid, step):
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self.log_dir)
        with self._writer.as_default():
            tf.summary.image("samples", grid[None], step=step)
        self._writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0:
            self.write(epoch + 1)


class KIDCallback(keras.callbacks.Callback):
    """Logs the kernel distance (KID) of a fixed sample every `every` epochs.

    Generates `num_images` images from a fixed seed, maps them and the real
    images through `feature_extractor`, and puts the mean and standard
    deviation of `keras_diffusion.metrics.KernelDistance` into `logs` as
    `name` and `name + "_std"` (so `CSVLogger`, `TensorBoard` and `History`,
    placed after this callback, record them). On the other epochs both are
    NaN, which keeps the CSV columns fixed from the first epoch.

    Args:
        real_images: array `(N, H, W, C)` in [-1, 1], the reference sample.
        feature_extractor: a Keras model or callable mapping images in
            [-1, 1] to `(batch, d)` features, `None` for raw pixels, or
            `"inception_v3"`; see `keras_diffusion.metrics.KernelDistance`.
        num_features: int or `None` (read from the extractor when it can be).
            Defaults to `None`.
        num_images: int, generated images per evaluation. Defaults to `200`.
        every: int, evaluate after every `every`-th epoch. Defaults to `1`.
        seed: int, seeds sampling, labels and subsets. Defaults to `0`.
        sampler: sampler for `generate`, or `None`. Defaults to `None`.
        guidance_scale: float, for a conditional model, whose labels are
            drawn uniformly at random. Defaults to `1.0`.
        num_subsets: int, KID subsets. Defaults to `10`.
        name: str, the key in `logs`. Defaults to `"kid"`.

    Example:

    ```python
    kid = KIDCallback(real, feature_extractor=classifier_features, every=5)
    model.fit(ds, epochs=20, callbacks=[kid, keras.callbacks.CSVLogger("log.csv")])
    ```
    """

    def __init__(
        self,
        real_images,
        feature_extractor,
        num_features=None,
        num_images=200,
        every=1,
        seed=0,
        sampler=None,
        guidance_scale=1.0,
        num_subsets=10,
        name="kid",
    ):
        super().__init__()
        from keras_diffusion.metrics import KernelDistance

        real_images = np.asarray(real_images, dtype=np.float32)
        if real_images.ndim != 4 or len(real_images) < 2:
            raise ValueError(
                "Argument `real_images` must be an (N, H, W, C) array with N >= 2. "
                f"Received: real_images with shape={real_images.shape}"
            )
        self.num_images = check_int("num_images", num_images, 1)
        self.every = check_int("every", every, 1)
        self.seed = seed
        self.sampler = sampler
        self.guidance_scale = guidance_scale
        self.name = name
        subset_size = max(2, min(len(real_images), self.num_images))
        self.metric = KernelDistance(
            feature_extractor=feature_extractor,
            num_features=num_features,
            num_subsets=num_subsets,
            subset_size=subset_size,
            max_samples=max(subset_size, len(real_images), self.num_images),
            seed=seed,
            name=name,
        )
        self.real_images = real_images

    def evaluate(self):
        """Samples and returns `(kid_mean, kid_std)` as Python floats."""
        kwargs = {}
        num_classes = getattr(self.model, "num_classes", None)
        if num_classes is not None:
            rng = np.random.default_rng(self.seed)
            kwargs["labels"] = rng.integers(0, num_classes, self.num_images).tolist()
            kwargs["guidance_scale"] = self.guidance_scale
        generated = self.model.generate(
            self.num_images, sampler=self.sampler, seed=self.seed, verbose=0, **kwargs
        )
        self.metric.reset_state()
        self.metric.update_state(real_images=self.real_images)
        self.metric.update_state(generated_images=generated)
        result = self.metric.result()
        return float(result[self.name]), float(result[f"{self.name}_std"])

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        if (epoch + 1) % self.every == 0:
            logs[self.name], logs[f"{self.name}_std"] = self.evaluate()
        else:
            logs[self.name] = logs[f"{self.name}_std"] = math.nan


class AtomicModelCheckpoint(keras.callbacks.Callback):
    """Saves the whole model to a `.keras` file every `every` epochs, atomically.

    Like `keras.callbacks.ModelCheckpoint(filepath)` with the default
    `save_best_only=False`, but the file is written under a temporary name and
    renamed, so a crash mid-save leaves the previous checkpoint intact.

    Args:
        filepath: str ending in `.keras`; may contain `{epoch}` (1-based).
        every: int, save after every `every`-th epoch. Defaults to `1`.
    """

    def __init__(self, filepath, every=1):
        super().__init__()
        filepath = os.fspath(filepath)
        if not filepath.endswith(".keras"):
            raise ValueError(
                "Argument `filepath` must end in '.keras'. "
                f"Received: filepath={filepath!r}"
            )
        self.filepath = filepath
        self.every = check_int("every", every, 1)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0:
            files.save_model(self.model, self.filepath.format(epoch=epoch + 1))


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
