"""A training run as a function: `train(config, output_dir)`.

`scripts/train.py` is a thin command line over `TrainConfig` and `train`.
The settings live in `keras_diffusion.run.config`, the run folder (its
files, resuming an interrupted run) in `keras_diffusion.run.folder`. The parts of
a run (schedule, data set, autoencoder, compiled model) are built in
`keras_diffusion.run.build`; this module writes the run's outputs and runs
`fit` with its callbacks.
"""

import dataclasses
import os
import time

import keras

from keras_diffusion import callbacks as callbacks_lib
from keras_diffusion.data import identity
from keras_diffusion.data.ordered import EpochOrder
from keras_diffusion.diagnostics.terminal_error import SamplingCheck
from keras_diffusion.run import config as train_config
from keras_diffusion.run import preemption, text
from keras_diffusion.run.build import (
    build_data_and_model,
    set_precision,
)
from keras_diffusion.run.folder import prepare_run_folder, resolve_cache_dir
from keras_diffusion.run.summary import sampling_cost, show_data
from keras_diffusion.schedules.registry import PROCESSES
from keras_diffusion.utils import files, run_files

__all__ = ["TrainResult", "train"]


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

    @classmethod
    def of(cls, run, model, tensorboard_dir, initial_epoch, config, started):
        """The result of a run in `run` (a `RunFolder`) begun at `started`."""
        return cls(
            output_dir=run.path,
            model_path=run.file(run_files.MODEL_FILE),
            samples_path=run.file(run_files.SAMPLES_FILE),
            config_path=run.file(run_files.CONFIG_FILE),
            log_path=run.file(run_files.LOG_FILE),
            tensorboard_dir=tensorboard_dir,
            initial_epoch=initial_epoch,
            epochs=config.epochs,
            seconds=time.time() - started,
            model=model,
        )


def _fit_callbacks(config, run, grid_options, tensorboard_dir, extra):
    """The callbacks of the run's `fit`, in the order they must run: `extra`
    first, so that what they do to a step is seen by the run's own. The
    grids of the epochs take the final grid's `grid_options`."""
    fit_callbacks = [*extra, callbacks_lib.StopOnNonFiniteLoss()]
    if config.sample_every:
        progress = callbacks_lib.SampleGrid(
            run.file(os.path.join(run_files.SAMPLES_DIR, "epoch_{epoch:04d}.png")),
            every=config.sample_every,
            **grid_options,
        )
        fit_callbacks.append(progress)
    fit_callbacks += [
        keras.callbacks.CSVLogger(run.file(run_files.LOG_FILE), append=True),
        callbacks_lib.AtomicModelCheckpoint(
            run.file(run_files.MODEL_FILE), every=config.checkpoint_every
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
    config = text.resumed_text_run(config, os.fspath(output_dir), overwrite)
    config = config.resolve()
    run, resume = prepare_run_folder(
        output_dir, config.sections(), overwrite, upgrade=train_config.upgrade
    )
    dataset, model, steps_per_epoch = _build(config, run, cache_dir, verbose)

    # Checks are done: from here on the folder changes.
    data = identity.identify(dataset)
    # One draw of the pipeline: data.png, the sampling check, grid controls.
    batch = next(iter(dataset.take(1)))
    controls, prompts = _grid_conditions(model, batch, dataset, config.num_samples)
    initial_epoch, prompts = _start_or_resume(
        run, resume, overwrite, config, (dataset, model, prompts), log, data
    )
    data_png = run.file(run_files.DATA_FILE)
    log(show_data(config, dataset, model, steps_per_epoch, data_png, batch))

    sample_grid, fit_callbacks, last_callbacks = _run_callbacks(
        config,
        run,
        (model.sampler, controls),
        steps_per_epoch,
        batch,
        callbacks,
        verbose,
        log,
        prompts,
    )
    _fit(
        model,
        dataset,
        config,
        run,
        (backup_every_steps, backup_every_minutes),
        log,
        data=data,
        callbacks=fit_callbacks,
        last_callbacks=last_callbacks,
        verbose=verbose,
    )
    _write_final_outputs(model, run, sample_grid, config.epochs)
    return TrainResult.of(
        run, model, sample_grid.log_dir, initial_epoch, config, started
    )


def _build(config, run, cache_dir, verbose):
    """`(dataset, model, steps_per_epoch)`, seeded by the config, under its
    precision policy; writes nothing but a folder's decode cache."""
    keras.utils.set_random_seed(config.seed)
    set_precision(config.mixed_precision)
    cache_dir = resolve_cache_dir(cache_dir, config, run.path)
    return build_data_and_model(config, verbose != 0, cache_dir)


def _start_or_resume(run, resume, overwrite, config, built, log, data):
    """Starts the run folder anew (its config.json, and before it a text
    model's vocabulary and grid prompts), or checks its backup and trims its
    log for a resume (a text model takes the vocabulary and prompts its run
    began with); returns the epoch training starts from and the grids'
    prompts. `built` is `(dataset, model, prompts)`, the prompts the data's
    (`text.run_prompts`) or `None`.

    `data` is the data's `identity.identify`: a backup of other data
    (files added, removed or renamed since) restarts its epoch, with one
    line that says so (`preemption.StepBackup.restore`)."""
    dataset, model, prompts = built
    if not resume:
        if overwrite:
            run.clear()
        os.makedirs(run.path, exist_ok=True)
        # Before config.json, which makes the folder a run to resume.
        text.write_vocabulary(run, model)
        text.write_prompts(run, prompts)
        run.write_config(config.sections())
        run.remove_leftovers()
        return 0, prompts
    text.restore_vocabulary(run, model)
    prompts = text.restore_prompts(run, prompts)
    run.remove_leftovers()
    run.check_backup()
    initial_epoch, initial_step = run.resume_point()
    if not hasattr(dataset, "epoch_batches"):
        initial_step = 0  # no epoch order: the interrupted epoch starts again
    saved = run.backup_data()
    if identity.changed(saved, data) and initial_epoch < config.epochs:
        log(_data_changed_message(saved, data, initial_epoch, initial_step))
        initial_step = 0
    log(run.resume_message(initial_epoch, config.epochs, initial_step))
    run.trim_log(initial_epoch)
    return initial_epoch, prompts


def _data_changed_message(saved, data, epoch, step):
    change = identity.describe_change(saved, data)
    if not step:
        return f"The data changed since the backup ({change}); training goes on."
    return (
        f"The data changed since the backup ({change}), so epoch {epoch + 1} "
        f"cannot continue after its step {step}: it starts again on the new "
        "data, from the backup's weights (the result is not the uninterrupted "
        "run's; pass --overwrite to start the run again)."
    )


def _grid_conditions(model, batch, dataset, num_samples):
    """The grids' `(control images or None, prompts)`: a text run's prompts
    are a spread of its `dataset`'s captions (`text.run_prompts`); a
    ControlNet run's controls are its extractor's of the pipeline's first
    `batch`, and a text ControlNet's grid draws its first images' controls
    under their own captions (`text.prompts_under_controls`)."""
    prompts = text.run_prompts(getattr(dataset, "captions", None))
    if model.controlnet is None:
        return None, prompts
    images = batch[0] if isinstance(batch, tuple) else batch
    controls = model.controlnet.extract(images)
    if prompts is None:
        return controls, None
    return text.prompts_under_controls(batch[1], controls, num_samples)


def _run_callbacks(
    config, run, grid_parts, steps_per_epoch, batch, extra, verbose, log, prompts=None
):
    """`(sample_grid, fit_callbacks, last_callbacks)`: the final grid's
    writer (its `log_dir` the run's TensorBoard folder, or `None`), the
    callbacks of `fit` (`extra` first) and those that run after the epoch's
    backup. `grid_parts` are the grids' `(sampler, control images or
    None)`; `prompts` are a text run's (`text.run_prompts`), else `None`."""
    sampler, controls = grid_parts
    tensorboard_dir = (
        run.file(run_files.TENSORBOARD_DIR) if config.tensorboard else None
    )
    grid_options = {
        "num_images": config.num_samples,
        "seed": config.seed,
        "sampler": sampler,
        "guidance_scale": config.guidance_scale,
        "log_dir": tensorboard_dir,
        # A text run: a row a prompt of the run's.
        "prompts": prompts,
        "control": controls,
    }
    sample_grid = callbacks_lib.SampleGrid(
        run.file(run_files.SAMPLES_FILE),
        # A text run's final grid has prompts.png beside it.
        captioned_filepath=prompts and run.file(run_files.PROMPTS_FILE),
        **grid_options,
    )
    fit_callbacks = _fit_callbacks(
        config, run, grid_options, tensorboard_dir, list(extra)
    )
    if config.posthoc_ema:
        updates = config.epochs * steps_per_epoch // config.grad_accum
        fit_callbacks.append(
            callbacks_lib.PosthocSnapshots(
                run.file(run_files.POSTHOC_DIR),
                every=max(1, -(-updates // config.posthoc_snapshots)),
                last=max(1, updates),
            )
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
    # It measures at the top timesteps of a VP schedule: not on EDM or flow.
    last_callbacks = []
    if PROCESSES[config.process].has_terminal_check:
        last_callbacks.append(SamplingCheck(batch, every=every, log=bar_log))
    return sample_grid, fit_callbacks, last_callbacks


def _fit(model, dataset, config, run, backup_every, log, data=None, **fit_kwargs):
    """`fit` for `config.epochs`, resumable: the resume state is written at
    each epoch's end, every `backup_every = (steps, minutes)` when given, and
    on SIGTERM / SIGINT at the next step boundary, with `data` (the data's
    `identity.identify`). `fit_kwargs` go to `preemption.fit_resumable` (the
    callbacks, the verbosity)."""
    every_steps, every_minutes = backup_every
    # The epoch order is a function of (seed, epoch), so that a resume in the
    # middle of an epoch continues it (keras_diffusion.data.ordered).
    order = EpochOrder(config.seed) if hasattr(dataset, "epoch_batches") else None
    with preemption.stop_on_signals(log=log) as stop:
        backup = preemption.StepBackup(
            run.backup_dir,
            every_steps=every_steps,
            every_seconds=None if every_minutes is None else 60.0 * every_minutes,
            stop=stop,
            data=data,
        )
        preemption.fit_resumable(
            model,
            dataset,
            order,
            config.epochs,
            backup,
            shuffle=False,  # the pipeline shuffles; fit would only warn
            **fit_kwargs,
        )


def _write_final_outputs(model, run, sample_grid, epochs):
    """The finished run's model.keras and samples.png; its backup goes."""
    files.save_model(model, run.file(run_files.MODEL_FILE))
    sample_grid.set_model(model)
    sample_grid.write(epochs)
    run.remove_backup()
