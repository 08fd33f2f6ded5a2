"""A training run as a function: `train(config, output_dir)`.

`scripts/train.py` is a thin command line over `TrainConfig` and `train`.
The settings live in `keras_diffusion.train_config`, the run folder (its
files, resuming an interrupted run) in `keras_diffusion.runs`; both are
re-exported here. This module builds the schedule, sampler, data set and
compiled model of a resolved config and runs `fit` with the run's callbacks.
"""

import dataclasses
import os
import shutil
import time

import keras
import numpy as np

from keras_diffusion import callbacks as callbacks_lib
from keras_diffusion import data as data_lib
from keras_diffusion import distribute
from keras_diffusion import images as images_lib
from keras_diffusion.checks import check_choice
from keras_diffusion.runs import (
    BACKUP_DIR,
    CONFIG_FILE,
    LOG_FILE,
    MODEL_FILE,
    SAMPLES_DIR,
    SAMPLES_FILE,
    TENSORBOARD_DIR,
    RunFolder,
    prepare_run_folder,
)
from keras_diffusion.train_config import (
    FALLBACK,
    LATENTS,
    LOSS_WEIGHTINGS,
    LR_SCHEDULES,
    MIXED_PRECISION,
    PREDICTION_TYPES,
    SAMPLERS,
    SCHEDULES,
    STRATEGIES,
    TrainConfig,
)

__all__ = [
    "BACKUP_DIR",
    "CONFIG_FILE",
    "FALLBACK",
    "LATENTS",
    "LOG_FILE",
    "LOSS_WEIGHTINGS",
    "LR_SCHEDULES",
    "MIXED_PRECISION",
    "MODEL_FILE",
    "PREDICTION_TYPES",
    "SAMPLERS",
    "SAMPLES_DIR",
    "SAMPLES_FILE",
    "SCHEDULES",
    "STRATEGIES",
    "TENSORBOARD_DIR",
    "RunFolder",
    "TrainConfig",
    "TrainResult",
    "build_autoencoder",
    "build_dataset",
    "build_model",
    "build_sampler",
    "build_schedule",
    "prepare_run_folder",
    "set_precision",
    "train",
]

# Building blocks.


def build_schedule(config):
    """The `NoiseSchedule` of a resolved config."""
    from keras_diffusion import NoiseSchedule

    kwargs = {}
    if config.beta_start is not None:
        kwargs["beta_start"] = config.beta_start
    if config.beta_end is not None:
        kwargs["beta_end"] = config.beta_end
    return NoiseSchedule(config.timesteps, beta_schedule=config.schedule, **kwargs)


def build_sampler(name, num_steps):
    """A sampler by short name: `"ddim"`, `"ddpm"`, `"dpm"` or `"euler"`."""
    from keras_diffusion import samplers

    check_choice("sampler", name, SAMPLERS)
    cls = {
        "ddim": samplers.DDIMSampler,
        "ddpm": samplers.DDPMSampler,
        "dpm": samplers.DPMSolverSampler,
        "euler": samplers.EulerSampler,
    }[name]
    return cls(num_steps=num_steps)


def build_dataset(config):
    """The training `tf.data.Dataset` of a resolved config."""
    kwargs = {}
    if config.dataset == "folder":
        kwargs["data_dir"] = config.data_dir
        kwargs["channels"] = config.channels
    elif config.data_dir:  # TrainConfig refuses a data_dir for the digits
        kwargs["path"] = config.data_dir
    try:
        return data_lib.make_dataset(
            config.dataset,
            config.batch_size,
            image_size=config.image_size,
            with_labels=config.class_conditional,
            seed=config.seed,
            **kwargs,
        )
    except ValueError as error:
        if config.dataset != "folder":
            raise
        # The loader names its own argument (`path`); say which flag it was.
        raise ValueError(f"{error} (data_dir, --data-dir)") from error


def build_autoencoder(config):
    """The frozen autoencoder of a resolved latent config, or `None`."""
    if config.latent == "none":
        return None
    from keras_diffusion.latent import StableDiffusionAutoencoder

    weights = config.autoencoder_weights
    if weights == "random":
        weights = None
    elif weights != "keras-cv":
        weights = tuple(weights.split(","))
    size = config.image_size
    return StableDiffusionAutoencoder((size, size, 3), weights=weights)


def _encode_latents(config, dataset, strategy):
    """`(dataset, autoencoder)`: the images encoded once, in memory, if latent."""
    with strategy.scope():
        autoencoder = build_autoencoder(config)
    if autoencoder is None:
        return dataset, None
    from keras_diffusion import latent

    # Small encoder batches: its activations at full resolution are large.
    moments, labels = latent.encode_dataset(autoencoder, dataset.unbatch().batch(8))
    latents = latent.latent_dataset(
        moments, config.batch_size, labels, seed=config.seed
    )
    return latents, autoencoder


def build_model(config, num_classes, steps_per_epoch, autoencoder=None):
    """The compiled `DiffusionModel` of a resolved config.

    Args:
        config: a resolved `TrainConfig`.
        num_classes: int, or `None` for an unconditional model.
        steps_per_epoch: int, for the cosine learning-rate decay.
        autoencoder: the `build_autoencoder` of a latent config: the U-Net
            is then sized for its latent grid. Defaults to `None`.
    """
    from keras_diffusion import DiffusionModel, UNet

    groups = 8 if all(w % 8 == 0 for w in config.widths) else 1
    shape = (config.image_size, config.image_size, config.channels)
    unet = UNet(
        shape if autoencoder is None else autoencoder.latent_shape,
        widths=config.widths,
        num_res_blocks=config.num_res_blocks,
        attention_levels=config.attention_levels,
        num_classes=num_classes,
        groups=groups,
    )
    model = DiffusionModel(
        unet,
        build_schedule(config),
        prediction_type=config.prediction_type,
        loss_weighting=None if config.loss_weighting == "none" else "min_snr",
        ema_decay=config.ema_decay,
        num_classes=num_classes,
        class_dropout=config.class_dropout if num_classes else 0.0,
        seed=config.seed,
        autoencoder=autoencoder,
    )
    learning_rate = config.learning_rate
    if config.lr_schedule == "cosine":
        learning_rate = keras.optimizers.schedules.CosineDecay(
            config.learning_rate, decay_steps=config.epochs * steps_per_epoch
        )
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
    )
    return model


def set_precision(mixed_precision):
    policy = {
        "none": "float32",
        "float16": "mixed_float16",
        "bfloat16": "mixed_bfloat16",
    }[mixed_precision]
    keras.mixed_precision.set_global_policy(policy)


def _count_steps(dataset):
    steps = int(dataset.cardinality())
    if steps < 0:  # unknown or infinite: count once (the data is cached)
        steps = sum(1 for _ in dataset)
    if steps == 0:
        raise ValueError("The dataset is empty: it yields no batch.")
    return steps


def _build_data_and_model(config):
    """`(dataset, model)` of a resolved config; checks, writes nothing."""
    # "none" is the default strategy, whose scope does nothing.
    strategy = distribute.make_strategy(config.strategy)
    dataset = build_dataset(config)
    num_classes = None
    if config.class_conditional:
        num_classes = len(getattr(dataset, "class_names", None) or []) or None
        if num_classes is None:
            raise ValueError(
                "Argument `class_conditional` needs labelled data (class "
                f"subfolders for a folder). Received: dataset={config.dataset!r}"
            )
    dataset, autoencoder = _encode_latents(config, dataset, strategy)
    steps_per_epoch = _count_steps(dataset)
    with strategy.scope():
        return dataset, build_model(config, num_classes, steps_per_epoch, autoencoder)


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


class _NaNAtStep(keras.callbacks.Callback):
    # A test hook: poisons one weight before optimizer step `step` (1-based),
    # so that step's loss is NaN, deterministically.
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_begin(self, batch, logs=None):
        done = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if done + 1 == self.step:
            weight = self.model.denoiser.trainable_variables[0]
            weight.assign(keras.ops.full(weight.shape, np.nan, weight.dtype))


def _fit_callbacks(config, run, sample_grid, tensorboard_dir, nan_at_step):
    """The callbacks of the run's `fit`, in the order they must run."""
    fit_callbacks = [callbacks_lib.StopOnNonFiniteLoss()]
    if nan_at_step:
        fit_callbacks.insert(0, _NaNAtStep(nan_at_step))
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
        # Kept until the final outputs exist: its presence marks the run as
        # unfinished. Two generations survive a kill in the middle of a save.
        keras.callbacks.BackupAndRestore(
            run.backup_dir, double_checkpoint=True, delete_checkpoint=False
        ),
    ]
    if tensorboard_dir:
        fit_callbacks.append(keras.callbacks.TensorBoard(tensorboard_dir))
    return fit_callbacks


def train(
    config, output_dir, overwrite=False, verbose="auto", log=print, nan_at_step=None
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
        nan_at_step: int or `None`; a test hook that makes the loss of that
            optimizer step NaN. Defaults to `None`.

    Returns:
        `TrainResult`.

    Raises:
        ValueError, TypeError: bad settings, data or run folder.
        keras_diffusion.data.DatasetDownloadError: data needs a download.
        keras_diffusion.callbacks.NonFiniteLossError: the loss diverged.
    """
    started = time.time()
    config = config.resolve()
    config_dict = config.to_dict()
    run, resume = prepare_run_folder(output_dir, config_dict, overwrite)

    keras.utils.set_random_seed(config.seed)
    set_precision(config.mixed_precision)
    dataset, model = _build_data_and_model(config)

    # Checks are done: from here on the folder changes.
    initial_epoch = 0
    if resume:
        initial_epoch = run.completed_epochs()
        log(run.resume_message(initial_epoch, config.epochs))
        run.trim_log(initial_epoch)
    else:
        if overwrite:
            run.clear()
        os.makedirs(run.path, exist_ok=True)
        run.write_config(config_dict)

    tensorboard_dir = run.file(TENSORBOARD_DIR) if config.tensorboard else None
    sample_grid = callbacks_lib.SampleGrid(
        run.file(SAMPLES_FILE),
        num_images=config.num_samples,
        seed=config.seed,
        sampler=build_sampler(config.sampler, config.sampling_steps),
        guidance_scale=config.guidance_scale,
        log_dir=tensorboard_dir,
    )
    model.fit(
        dataset,
        epochs=config.epochs,
        callbacks=_fit_callbacks(
            config, run, sample_grid, tensorboard_dir, nan_at_step
        ),
        verbose=verbose,
        shuffle=False,  # the pipeline shuffles; fit would only warn
    )
    images_lib.save_model(model, run.file(MODEL_FILE))
    sample_grid.set_model(model)
    sample_grid.write(config.epochs)
    if os.path.isdir(run.backup_dir):
        shutil.rmtree(run.backup_dir)
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
