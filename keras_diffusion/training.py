"""A training run as a function: config, run folder, resume, final outputs.

`scripts/train.py` is a thin command line over `TrainConfig` and `train`. A
run folder holds:

- `config.json`: every setting used (written when training starts);
- `log.csv`: one row per epoch (`keras.callbacks.CSVLogger`);
- `backup/`: `keras.callbacks.BackupAndRestore`'s weights (model, EMA,
  optimizer slots, the noise seed state) and epoch counter, kept while the run
  is unfinished and removed once the final outputs are written;
- `model.keras`: the whole `DiffusionModel` (saved every `checkpoint_every`
  epochs and at the end, always through a temporary file and a rename);
- `samples.png`: a grid of EMA samples from the final model (one row per
  class for a class-conditional model);
- `tensorboard/`, `samples/`: only with `tensorboard` / `sample_every`.

A folder with `backup/` (or with `config.json` and no `model.keras`) holds an
interrupted run: the same settings resume it. A folder with `model.keras` and
no `backup/` holds a finished run, replaced only with `overwrite=True`.
"""

import copy
import csv
import dataclasses
import importlib.util
import json
import os
import shutil
import time

import keras
import numpy as np

from keras_diffusion import callbacks as callbacks_lib
from keras_diffusion import data as data_lib
from keras_diffusion import images as images_lib

SAMPLERS = ("ddim", "ddpm", "dpm", "euler")
SCHEDULES = ("linear", "scaled_linear", "cosine", "sigmoid")
PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")
LOSS_WEIGHTINGS = ("none", "min_snr")
STRATEGIES = ("none", "mirrored", "multiworker")
MIXED_PRECISION = ("none", "float16", "bfloat16")

CONFIG_FILE = "config.json"
MODEL_FILE = "model.keras"
SAMPLES_FILE = "samples.png"
LOG_FILE = "log.csv"
BACKUP_DIR = "backup"
_RUN_ENTRIES = (CONFIG_FILE, MODEL_FILE, SAMPLES_FILE, LOG_FILE, BACKUP_DIR)
_RUN_DIRS = (BACKUP_DIR, "samples", "tensorboard")


# Settings tuned for a dataset, over its `keras_diffusion.data` preset: the
# digits ones make the default run finish in a few minutes on two CPU cores
# with recognisable digits of every class.
@dataclasses.dataclass
class TrainConfig:
    """Every setting of a training run; `None` means "from the dataset preset".

    `resolve()` fills each `None` from the dataset's `keras_diffusion.data`
    preset (its schedule, model and training settings), then from the generic
    fallback, and checks
    every value. The resolved config is what `config.json` records.

    Args:
        dataset: `"digits"`, `"mnist"`, `"fashion_mnist"`, `"cifar10"` or
            `"folder"`.
        data_dir: the image folder for `"folder"`; for a keras data set, an
            optional local `.npz` (no download).
        image_size: int, images are resized to `image_size x image_size`.
        channels: 1 or 3 (a folder only).
        epochs: int, training epochs.
        batch_size: int, global batch size.
        learning_rate: float, Adam's (peak) learning rate.
        lr_schedule: `"constant"` or `"cosine"` (decay to 0 over the run).
        schedule: beta schedule name, see `keras_diffusion.NoiseSchedule`.
        timesteps: int, T, the number of diffusion steps.
        beta_start: float or `None` (the schedule's default).
        beta_end: float or `None` (the schedule's default).
        prediction_type: `"epsilon"`, `"v_prediction"` or `"sample"`.
        loss_weighting: `"none"` or `"min_snr"`.
        ema_decay: float in [0, 1).
        widths: list of ints, U-Net channels per level.
        num_res_blocks: int, residual blocks per level.
        attention_levels: list of bools, one per level.
        class_conditional: bool, train on labels (classifier-free guidance).
        class_dropout: float, label dropout for guidance.
        guidance_scale: float, guidance of the sample grid.
        mixed_precision: `"none"`, `"float16"` or `"bfloat16"`.
        jit_compile: bool or `"auto"`.
        steps_per_execution: int.
        seed: int, seeds weights, noise, data order and samples.
        sampler: `"ddim"`, `"ddpm"`, `"dpm"` or `"euler"` for the grid.
        sampling_steps: int, sampler steps (`"ddpm"`: up to T).
        num_samples: int, images in the final grid.
        sample_every: int, also write `samples/epoch_NNNN.png` every so many
            epochs; 0 for the final grid only.
        checkpoint_every: int, save `model.keras` every so many epochs.
        tensorboard: bool, log to `tensorboard/`.
        strategy: `"none"`, `"mirrored"` or `"multiworker"`.
    """

    dataset: str = data_lib.DEFAULT_DATASET
    data_dir: str | None = None
    image_size: int | None = None
    channels: int | None = None
    epochs: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    lr_schedule: str | None = None
    schedule: str | None = None
    timesteps: int | None = None
    beta_start: float | None = None
    beta_end: float | None = None
    prediction_type: str | None = None
    loss_weighting: str = "none"
    ema_decay: float | None = None
    widths: list | None = None
    num_res_blocks: int | None = None
    attention_levels: list | None = None
    class_conditional: bool | None = None
    class_dropout: float | None = None
    guidance_scale: float | None = None
    mixed_precision: str = "none"
    jit_compile: bool | str = "auto"
    steps_per_execution: int = 1
    seed: int = 0
    sampler: str | None = None
    sampling_steps: int | None = None
    num_samples: int | None = None
    sample_every: int = 0
    checkpoint_every: int = 5
    tensorboard: bool = False
    strategy: str = "none"

    def resolve(self):
        """Returns a new config with every `None` filled in and all values checked."""
        _check_choice("dataset", self.dataset, data_lib.DATASET_NAMES)
        values = dataclasses.asdict(self)
        fallback = {
            "image_size": 64,
            "channels": 3,
            "epochs": 50,
            "batch_size": 64,
            "learning_rate": 2e-4,
            "lr_schedule": "constant",
            "schedule": "cosine",
            "timesteps": 1000,
            "prediction_type": "epsilon",
            "ema_decay": 0.999,
            "widths": [64, 128, 256, 256],
            "num_res_blocks": 2,
            "attention_levels": [False, False, True, False],
            "class_conditional": False,
            "class_dropout": 0.1,
            "guidance_scale": 1.0,
            "sampler": "ddim",
            "sampling_steps": 50,
            "num_samples": 64,
        }
        if self.dataset in data_lib.PRESETS:
            preset = data_lib.get_preset(self.dataset)
            fallback.update(
                image_size=preset.image_size,
                channels=preset.channels,
                schedule=preset.schedule.get("beta_schedule", "linear"),
                timesteps=preset.schedule.get("num_train_timesteps", 1000),
                widths=list(preset.model["widths"]),
                num_res_blocks=preset.model["num_res_blocks"],
                attention_levels=list(preset.model["attention_levels"]),
            )
            fallback.update(copy.deepcopy(preset.training))
            if self.schedule in (None, fallback["schedule"]) and self.timesteps in (
                None,
                fallback["timesteps"],
            ):
                fallback["beta_start"] = preset.schedule.get("beta_start")
                fallback["beta_end"] = preset.schedule.get("beta_end")
        for key, value in values.items():
            if value is None and key in fallback:
                values[key] = fallback[key]
        if values["attention_levels"] is None or len(values["attention_levels"]) != len(
            values["widths"]
        ):
            if self.attention_levels is not None:
                raise ValueError(
                    "Argument `attention_levels` must have one entry per level of "
                    f"widths={values['widths']}. Received: "
                    f"attention_levels={self.attention_levels!r}"
                )
            values["attention_levels"] = [False] * len(values["widths"])
        config = TrainConfig(**values)
        config._check()
        return config

    def _check(self):
        if (self.dataset == "folder") and not self.data_dir:
            raise ValueError(
                "Argument `data_dir` (--data-dir) is required with dataset='folder'. "
                f"Received: data_dir={self.data_dir!r}"
            )
        if self.dataset == "digits" and self.data_dir:
            raise ValueError(
                "The embedded digits take no `data_dir` (--data-dir). "
                f"Received: data_dir={self.data_dir!r}"
            )
        for name in ("image_size", "epochs", "batch_size", "timesteps"):
            _check_int(name, getattr(self, name), 1)
        _check_int("num_res_blocks", self.num_res_blocks, 1)
        _check_int("steps_per_execution", self.steps_per_execution, 1)
        _check_int("sampling_steps", self.sampling_steps, 1)
        _check_int("num_samples", self.num_samples, 1)
        _check_int("sample_every", self.sample_every, 0)
        _check_int("checkpoint_every", self.checkpoint_every, 1)
        _check_int("seed", self.seed, 0)
        if self.timesteps < 2:
            raise ValueError(
                f"Argument `timesteps` must be at least 2. Received: "
                f"timesteps={self.timesteps}"
            )
        if self.channels not in (1, 3):
            raise ValueError(
                "Argument `channels` must be 1 or 3. "
                f"Received: channels={self.channels!r}"
            )
        if not self.widths or not all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 1
            for w in self.widths
        ):
            raise ValueError(
                "Argument `widths` must be a non-empty list of positive ints. "
                f"Received: widths={self.widths!r}"
            )
        _check_positive_float("learning_rate", self.learning_rate)
        _check_choice("lr_schedule", self.lr_schedule, ("constant", "cosine"))
        _check_choice("schedule", self.schedule, SCHEDULES)
        _check_choice("prediction_type", self.prediction_type, PREDICTION_TYPES)
        _check_choice("loss_weighting", self.loss_weighting, LOSS_WEIGHTINGS)
        _check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION)
        _check_choice("sampler", self.sampler, SAMPLERS)
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_choice("jit_compile", self.jit_compile, (True, False, "auto"))
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(
                "Argument `ema_decay` must be in [0, 1). "
                f"Received: ema_decay={self.ema_decay!r}"
            )
        if not 0.0 <= self.class_dropout < 1.0:
            raise ValueError(
                "Argument `class_dropout` must be in [0, 1). "
                f"Received: class_dropout={self.class_dropout!r}"
            )
        if self.guidance_scale != 1.0 and not self.class_conditional:
            raise ValueError(
                "Argument `guidance_scale` needs a class-conditional model "
                "(--class-conditional). Received: "
                f"guidance_scale={self.guidance_scale!r}, class_conditional=False"
            )
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ValueError(
                "Argument `tensorboard` (--tensorboard) needs the tensorboard "
                "package (pip install tensorboard). Received: tensorboard=True"
            )
        if self.sampler == "ddpm" and self.sampling_steps > self.timesteps:
            raise ValueError(
                "Argument `sampling_steps` must be at most "
                f"timesteps={self.timesteps}. "
                f"Received: sampling_steps={self.sampling_steps}"
            )

    def to_dict(self):
        return dataclasses.asdict(self)


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"Argument `{name}` must be an int >= {minimum}. Received: {name}={value!r}"
        )


def _check_positive_float(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(
            f"Argument `{name}` must be a positive number. Received: {name}={value!r}"
        )


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"Argument `{name}` must be one of {', '.join(map(repr, choices))}. "
            f"Received: {name}={value!r}"
        )


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

    _check_choice("sampler", name, SAMPLERS)
    cls = {
        "ddim": samplers.DDIMSampler,
        "ddpm": samplers.DDPMSampler,
        "dpm": samplers.DPMSolverSampler,
        "euler": samplers.EulerSampler,
    }[name]
    return cls(num_steps=num_steps)


def build_dataset(config, num_classes=None):
    """The training `tf.data.Dataset` of a resolved config."""
    kwargs = {}
    if config.dataset == "folder":
        kwargs["data_dir"] = config.data_dir
        kwargs["channels"] = config.channels
    elif config.data_dir and config.dataset != "digits":
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


def build_model(config, num_classes, steps_per_epoch):
    """The compiled `DiffusionModel` of a resolved config.

    Args:
        config: a resolved `TrainConfig`.
        num_classes: int, or `None` for an unconditional model.
        steps_per_epoch: int, for the cosine learning-rate decay.
    """
    from keras_diffusion import DiffusionModel, UNet

    groups = 8 if all(w % 8 == 0 for w in config.widths) else 1
    unet = UNet(
        (config.image_size, config.image_size, config.channels),
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


# The run folder.


@dataclasses.dataclass
class RunFolder:
    """Paths and state of a run folder; see the module docstring."""

    path: str

    def file(self, name):
        return os.path.join(self.path, name)

    @property
    def backup_dir(self):
        return self.file(BACKUP_DIR)

    def state(self):
        """`"empty"`, `"finished"`, `"interrupted"` or `"foreign"`."""
        if not os.path.isdir(self.path) or not os.listdir(self.path):
            return "empty"
        if os.path.isdir(self.backup_dir):
            return "interrupted"
        if os.path.exists(self.file(MODEL_FILE)):
            return "finished"
        if os.path.exists(self.file(CONFIG_FILE)):
            return "interrupted"
        return "foreign"

    def read_config(self):
        try:
            with open(self.file(CONFIG_FILE)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def completed_epochs(self):
        """Epochs the backup holds (0 without a readable backup)."""
        for name in ("training_metadata.json", "training_metadata.json.bkp"):
            try:
                with open(os.path.join(self.backup_dir, name)) as f:
                    epoch = int(json.load(f)["epoch"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if name.endswith(".bkp"):
                self._restore_previous_backup()
            return epoch
        return 0

    def _restore_previous_backup(self):
        # The newest metadata is unreadable (killed while writing it): fall
        # back to the previous backup pair that `double_checkpoint` keeps.
        for name in ("latest.weights.h5", "training_metadata.json"):
            previous = os.path.join(self.backup_dir, name + ".bkp")
            if os.path.exists(previous):
                shutil.copyfile(previous, os.path.join(self.backup_dir, name))

    def clear(self):
        """Removes this run's own files (nothing else in the folder)."""
        for name in _RUN_ENTRIES + _RUN_DIRS:
            target = self.file(name)
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target):
                os.remove(target)

    def write_config(self, config_dict):
        with images_lib.atomic_write(self.file(CONFIG_FILE)) as tmp:
            with open(tmp, "w") as f:
                json.dump(config_dict, f, indent=2, sort_keys=True)
                f.write("\n")

    def trim_log(self, epochs):
        """Keeps the CSV log's rows of the first `epochs` epochs (0-based < epochs)."""
        path = self.file(LOG_FILE)
        if not os.path.exists(path):
            return
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows:
            return
        kept = [rows[0]] + [
            row for row in rows[1:] if row and row[0].isdigit() and int(row[0]) < epochs
        ]
        with images_lib.atomic_write(path) as tmp:
            with open(tmp, "w", newline="") as f:
                csv.writer(f).writerows(kept)


def _differences(saved, current):
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: {saved.get(k)!r} -> {current.get(k)!r}"
        for k in keys
        if saved.get(k) != current.get(k)
    ]


def prepare_run_folder(output_dir, config_dict, overwrite=False):
    """Checks `output_dir` against the run about to start; changes nothing.

    Returns:
        `(run_folder, resume)`: whether an interrupted run is resumed.

    Raises:
        ValueError: the folder holds a finished run, an interrupted run with
            other settings, or unrelated files, and `overwrite` is False.
    """
    run = RunFolder(os.fspath(output_dir))
    if os.path.exists(run.path) and not os.path.isdir(run.path):
        raise ValueError(
            "Argument `output_dir` (--output-dir) must be a folder. "
            f"Received: output_dir={run.path!r}, an existing file"
        )
    state = run.state()
    if overwrite or state == "empty":
        return run, False
    if state == "finished":
        raise ValueError(
            f"The output folder {run.path!r} holds a finished run ({MODEL_FILE}); "
            "pass --overwrite (overwrite=True) to replace it, or choose another "
            "--output-dir."
        )
    if state == "foreign":
        raise ValueError(
            f"The output folder {run.path!r} is not empty and holds no run "
            f"({CONFIG_FILE}); choose another --output-dir, or pass --overwrite "
            "(overwrite=True) to write into it anyway."
        )
    saved = run.read_config()
    if saved is None or saved != config_dict:
        changed = _differences(saved or {}, config_dict)
        raise ValueError(
            f"The output folder {run.path!r} holds an interrupted run with other "
            f"settings ({'; '.join(changed[:6]) or 'unreadable config.json'}); "
            "rerun with the same flags to resume it, or pass --overwrite "
            "(overwrite=True) to start again."
        )
    return run, True


def _make_strategy(name):
    if name == "none":
        return None
    from keras_diffusion.distribute import make_strategy

    return make_strategy(name)


def _count_steps(dataset):
    steps = int(dataset.cardinality())
    if steps < 0:  # unknown or infinite: count once (the data is cached)
        steps = sum(1 for _ in dataset)
    if steps == 0:
        raise ValueError("The dataset is empty: it yields no batch.")
    return steps


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
    strategy = _make_strategy(config.strategy)
    dataset = build_dataset(config)
    num_classes = None
    if config.class_conditional:
        num_classes = len(getattr(dataset, "class_names", None) or []) or None
        if num_classes is None:
            raise ValueError(
                "Argument `class_conditional` needs labelled data (class "
                f"subfolders for a folder). Received: dataset={config.dataset!r}"
            )
    steps_per_epoch = _count_steps(dataset)
    if strategy is None:
        model = build_model(config, num_classes, steps_per_epoch)
    else:
        with strategy.scope():
            model = build_model(config, num_classes, steps_per_epoch)

    # Checks are done: from here on the folder changes.
    initial_epoch = 0
    if resume:
        initial_epoch = run.completed_epochs()
        if initial_epoch >= config.epochs:
            log(
                f"Resuming the run in {run.path}: all {config.epochs} epochs are "
                "done; writing the final outputs."
            )
        elif initial_epoch > 0:
            log(
                f"Resuming the interrupted run in {run.path} from epoch "
                f"{initial_epoch + 1}/{config.epochs} ({initial_epoch} epochs "
                "restored from backup/)."
            )
        else:
            log(
                f"The run in {run.path} was interrupted before its first epoch "
                "ended; starting again from epoch 1."
            )
        run.trim_log(initial_epoch)
    else:
        if overwrite:
            run.clear()
        os.makedirs(run.path, exist_ok=True)
        run.write_config(config_dict)

    tensorboard_dir = run.file("tensorboard") if config.tensorboard else None
    sample_grid = callbacks_lib.SampleGrid(
        run.file(SAMPLES_FILE),
        num_images=config.num_samples,
        seed=config.seed,
        sampler=build_sampler(config.sampler, config.sampling_steps),
        guidance_scale=config.guidance_scale,
        log_dir=tensorboard_dir,
    )
    fit_callbacks = [callbacks_lib.StopOnNonFiniteLoss()]
    if nan_at_step:
        fit_callbacks.insert(0, _NaNAtStep(nan_at_step))
    if config.sample_every:
        progress = callbacks_lib.SampleGrid(
            run.file(os.path.join("samples", "epoch_{epoch:04d}.png")),
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
    model.fit(
        dataset,
        epochs=config.epochs,
        callbacks=fit_callbacks,
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
