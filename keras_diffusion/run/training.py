"""A training run as a function: `train(config, output_dir)`.

`scripts/train.py` is a thin command line over `TrainConfig` and `train`.
The settings live in `keras_diffusion.run.config`, the run folder (its
files, resuming an interrupted run) in `keras_diffusion.run.folder`. The parts of
a run (schedule, data set, autoencoder, compiled model) are built in
`keras_diffusion.run.build`, whose `build_*` functions are re-exported here;
this module writes the run's outputs and runs `fit` with its callbacks.
"""

import dataclasses
import os
import time

import keras
import numpy as np

from keras_diffusion import callbacks as callbacks_lib
from keras_diffusion import samplers
from keras_diffusion.data.ordered import EpochOrder
from keras_diffusion.diagnostics.terminal_error import SamplingCheck
from keras_diffusion.run import preemption
from keras_diffusion.run.build import (
    build_autoencoder,
    build_data_and_model,
    build_dataset,
    build_model,
    build_schedule,
    set_precision,
)
from keras_diffusion.run.folder import (
    CONFIG_FILE,
    DATA_FILE,
    LOG_FILE,
    MODEL_FILE,
    SAMPLES_DIR,
    SAMPLES_FILE,
    TENSORBOARD_DIR,
    prepare_run_folder,
    resolve_cache_dir,
)
from keras_diffusion.utils import files
from keras_diffusion.utils import images as images_lib

# What this module offers (the builders from `keras_diffusion.run.build`); the
# settings live in `keras_diffusion.run.config` (`TrainConfig`, the allowed
# values), the run folder in `keras_diffusion.run.folder`.
__all__ = [
    "TrainResult",
    "build_autoencoder",
    "build_dataset",
    "build_model",
    "build_schedule",
    "set_precision",
    "train",
]

# What a run shows and writes.


def show_data(config, dataset, model, steps_per_epoch, path, batch=None):
    """Writes a grid of one training batch to `path`; returns a one-line summary.

    The batch comes from the training pipeline itself, after every step of
    preprocessing, so the grid is what the model sees; `batch` is one drawn
    already (each draw moves the pipeline's shuffle on by an epoch).
    """
    batch = next(iter(dataset.take(1))) if batch is None else batch
    images = np.asarray(batch[0] if isinstance(batch, tuple) else batch)
    if getattr(model, "autoencoder", None) is not None:
        images = _decoded_means(model.autoencoder, images[:16])
    images_lib.save_grid(images[:64], path)
    source = f" from {config.data_dir!r}" if config.data_dir else ""
    count = getattr(dataset, "num_examples", None)
    count = f"{count:,} images" if count is not None else "images"
    classes = len(getattr(dataset, "class_names", None) or [])
    labelled = f"{classes} classes" if config.class_conditional else "no labels"
    size = f" (--model-size {config.model_size})" if config.model_size else ""
    return (
        f"Data: {count}{source} ({config.dataset}), {labelled}, shape "
        f"{'x'.join(str(d) for d in images.shape[1:])}, values in "
        f"[{images.min():.2f}, {images.max():.2f}] (first batch); "
        f"{steps_per_epoch} steps of {config.batch_size} an epoch; U-Net "
        f"{model.denoiser.count_params() / 1e6:.2f} M parameters{size}. "
        f"A training batch: {path}"
    )


def _decoded_means(autoencoder, moments):
    """Cached moments seen as images: their posterior means, decoded."""
    from keras_diffusion.latent import SCALING_FACTOR

    mean = moments[..., : moments.shape[-1] // 2]
    return np.asarray(autoencoder.decode(mean * SCALING_FACTOR))


def sampling_cost(config):
    """The final sample grid's work in training steps: a sampler step is one
    forward pass (two with guidance) and a training step about three."""
    guided = config.class_conditional and config.guidance_scale != 1.0
    calls = config.sampling_steps
    if config.sampler == "heun":
        calls = 2 * calls - 1
    passes = config.num_samples * calls * (2 if guided else 1)
    return passes / (3 * config.batch_size)


@dataclasses.dataclass
class TrainResult:
    """What `train` wrote: the run folder, its files and the resumed epoch."""

    output_dir: str
    model_path: str
    samples_path: str
    config_path: str
    log_path: str
    tensorboard_dir: str | None
    initial_epoch: int
    epochs: int
    seconds: float
    model: object = dataclasses.field(repr=False, default=None)


def _fit_callbacks(config, run, sample_grid, tensorboard_dir, extra):
    """The callbacks of the run's `fit`, in the order they must run: `extra`
    first, so that what they do to a step is seen by the run's own."""
    fit_callbacks = [*extra, callbacks_lib.StopOnNonFiniteLoss()]
    if config.sample_every:
        progress = callbacks_lib.SampleGrid(
            run.file(os.path.join(SAMPLES_DIR, "epoch_{epoch:04d}.png")),
            num_images=config.num_samples,
            every=config.sample_every,
            seed=config.seed,
            sampler=sample_grid.sampler,
            guidance_scale=config.guidance_scale,
            log_dir=tensorboard_dir,
        )
        fit_callbacks.append(progress)
    fit_callbacks += [
        keras.callbacks.CSVLogger(run.file(LOG_FILE), append=True),
        callbacks_lib.AtomicModelCheckpoint(
            run.file(MODEL_FILE), every=config.checkpoint_every
        ),
    ]
    if tensorboard_dir:
        fit_callbacks.append(keras.callbacks.TensorBoard(tensorboard_dir))
    return fit_callbacks


def train(
    config,
    output_dir,
    overwrite=False,
    verbose="auto",
    log=print,
    callbacks=(),
    cache_dir="auto",
    backup_every_steps=None,
    backup_every_minutes=None,
):
    """Trains a model as `config` says, in the run folder `output_dir`.

    Every check (settings, run folder, data, model) happens before anything
    is written. An interrupted run in `output_dir` with the same settings is
    resumed from its last completed epoch (weights, EMA, optimizer and the
    noise seed state come back from `backup/`).

    Args:
        config: `TrainConfig` (resolved here).
        output_dir: str, the run folder.
        overwrite: bool, replace a finished (or differing) run. Defaults to
            `False`.
        verbose: `fit`'s verbosity. Defaults to `"auto"` (a progress bar).
        log: callable taking one message string. Defaults to `print`.
        callbacks: more `keras.callbacks.Callback`s for `fit`, run before
            the run's own. Defaults to none.
        cache_dir: an image folder's decode cache: a folder, `"auto"`
            (`<output_dir>/cache`, kept by `overwrite` and after the run, so
            that a rerun or a resumed run decodes nothing) or `"none"`
            (decode into memory on every run). Defaults to `"auto"`.
        backup_every_steps: int or `None`: also write the resume state
            (`backup/`) every so many optimizer steps, besides every epoch.
            Defaults to `None`.
        backup_every_minutes: a number > 0 or `None`: also write it at the
            first step boundary once so many minutes have passed since the
            last write. Defaults to `None`.

    SIGTERM and SIGINT during `fit` write the resume state at the next step
    boundary and raise `keras_diffusion.run.preemption.Preempted` (a second
    signal exits at once); the same call resumes in the middle of the epoch,
    with the data order and result of an uninterrupted run
    (`keras_diffusion.run.preemption`).

    Returns:
        `TrainResult`.

    Raises:
        ValueError, TypeError: bad settings, data or run folder.
        keras_diffusion.data.DatasetDownloadError: data needs a download.
        keras_diffusion.callbacks.NonFiniteLossError: the loss diverged.
        keras_diffusion.run.preemption.Preempted: stopped by a signal.
    """
    started = time.time()
    preemption.check_backup_intervals(backup_every_steps, backup_every_minutes)
    config = config.resolve()
    config_dict = config.to_dict()
    run, resume = prepare_run_folder(output_dir, config_dict, overwrite)

    keras.utils.set_random_seed(config.seed)
    set_precision(config.mixed_precision)
    cache_dir = resolve_cache_dir(cache_dir, config, run.path)
    dataset, model, steps_per_epoch = build_data_and_model(
        config, verbose != 0, cache_dir
    )

    # Checks are done: from here on the folder changes.
    initial_epoch = 0
    if resume:
        run.check_backup()
        initial_epoch, initial_step = run.resume_point()
        if not hasattr(dataset, "epoch_batches"):
            initial_step = 0  # latents: the interrupted epoch starts again
        log(run.resume_message(initial_epoch, config.epochs, initial_step))
        run.trim_log(initial_epoch)
    else:
        if overwrite:
            run.clear()
        os.makedirs(run.path, exist_ok=True)
        run.write_config(config_dict)
    run.remove_leftovers()
    # One draw of the pipeline, for data.png and the sampling check.
    batch = next(iter(dataset.take(1)))
    log(show_data(config, dataset, model, steps_per_epoch, run.file(DATA_FILE), batch))

    tensorboard_dir = run.file(TENSORBOARD_DIR) if config.tensorboard else None
    sample_grid = callbacks_lib.SampleGrid(
        run.file(SAMPLES_FILE),
        num_images=config.num_samples,
        seed=config.seed,
        sampler=samplers.get(config.sampler, num_steps=config.sampling_steps),
        guidance_scale=config.guidance_scale,
        log_dir=tensorboard_dir,
    )
    fit_callbacks = _fit_callbacks(
        config, run, sample_grid, tensorboard_dir, list(callbacks)
    )
    # Under a live progress bar the estimate starts on a line of its own.
    on_bar = verbose in (1, "auto")
    bar_log = (lambda message: log("\n" + message)) if on_bar else log
    fit_callbacks.append(
        callbacks_lib.TimeEstimate(
            config.epochs,
            steps_per_epoch,
            extra_steps=sampling_cost(config),
            log=bar_log,
        )
    )
    # One line when the samples will be noise: at the end, and at each grid.
    every = config.sample_every or None
    # It measures at the top timesteps of a VP schedule: not on EDM.
    checks_last = []
    if config.schedule != "edm":
        checks_last.append(SamplingCheck(batch, every=every, log=bar_log))
    # The epoch order is a function of (seed, epoch), so that a resume in the
    # middle of an epoch continues it (keras_diffusion.data.ordered).
    order = EpochOrder(config.seed) if hasattr(dataset, "epoch_batches") else None
    with preemption.stop_on_signals(log=log) as stop:
        backup = preemption.StepBackup(
            run.backup_dir,
            every_steps=backup_every_steps,
            every_seconds=None
            if backup_every_minutes is None
            else 60.0 * backup_every_minutes,
            stop=stop,
        )
        preemption.fit_resumable(
            model,
            dataset,
            order,
            config.epochs,
            backup,
            callbacks=fit_callbacks,
            last_callbacks=checks_last,
            verbose=verbose,
            shuffle=False,  # the pipeline shuffles; fit would only warn
        )
    files.save_model(model, run.file(MODEL_FILE))
    sample_grid.set_model(model)
    sample_grid.write(config.epochs)
    run.remove_backup()
    return TrainResult(
        output_dir=run.path,
        model_path=run.file(MODEL_FILE),
        samples_path=run.file(SAMPLES_FILE),
        config_path=run.file(CONFIG_FILE),
        log_path=run.file(LOG_FILE),
        tensorboard_dir=tensorboard_dir,
        initial_epoch=initial_epoch,
        epochs=config.epochs,
        seconds=time.time() - started,
        model=model,
    )
