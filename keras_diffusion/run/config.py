"""`TrainConfig`: every setting of a training run, resolved and checked.

`None` means "from the dataset preset": `TrainConfig.resolve()` fills each
`None` from the dataset's `keras_diffusion.data` preset (its schedule, model
and training settings), then from `FALLBACK`, and checks every value. The
resolved config is what a run folder's `config.json` records.
"""

import copy
import dataclasses

from keras_diffusion import data as data_lib
from keras_diffusion.data import decode
from keras_diffusion.models.unet_sizes import (
    MODEL_SIZES,
    default_model_size,
    gpu_present,
    unet_settings,
)
from keras_diffusion.run import config_checks, init_from, process_config

# The choices of each setting, re-exported for the command line and tests:
# those of the classes that use them (SAMPLERS, PREDICTION_TYPES,
# LOSS_WEIGHTINGS, STRATEGIES, BETA_SCHEDULES) and a run's own (LR_SCHEDULES,
# MIXED_PRECISION, LATENTS), all checked in `config_checks`.
from keras_diffusion.run.config_checks import (  # noqa: F401
    LATENTS,
    LOSS_WEIGHTINGS,
    LR_SCHEDULES,
    MIXED_PRECISION,
    PREDICTION_TYPES,
    SAMPLERS,
    STRATEGIES,
)
from keras_diffusion.schedules.noise_schedule import BETA_SCHEDULES  # noqa: F401
from keras_diffusion.schedules.process import PROCESSES
from keras_diffusion.utils.checks import check_choice, check_int

# The values of `schedule` (beta schedules, and processes other than "vp")
# and of `process`, with the processes the library registers; those of
# `beta_schedule` are BETA_SCHEDULES (the processes and the values of
# `schedule` are `keras_diffusion.run.process_config`'s).
SCHEDULES = process_config.schedule_choices()
PROCESS_NAMES = ("vp", *(name for name in PROCESSES if name != "vp"))

# The settings of a dataset without a preset (an image folder); its U-Net is
# `default_model_size()` ("tiny" on a CPU, "base" on a GPU) for the image size.
# v-prediction on the cosine schedule, sampled with the process's default
# sampler for it (DPM-Solver++ 2M in 20 steps), was measured on 32x32 emoji
# (docs/quality.md, "Image folders"): epsilon prediction and DDIM-50 scored
# further from the held-out images.
FALLBACK = {
    "image_size": 64,
    "channels": 3,
    "background": decode.DEFAULT_BACKGROUND,
    "resize": decode.DEFAULT_RESIZE,
    "epochs": 50,
    "batch_size": 64,
    "learning_rate": 2e-4,
    "lr_schedule": "constant",
    "schedule": "cosine",
    "timesteps": 1000,
    "prediction_type": "v_prediction",
    "ema_decay": 0.999,
    "class_conditional": False,
    "class_dropout": 0.1,
    "guidance_scale": 1.0,
    # Without a preset's sampler, the process's default for the prediction
    # type (`keras_diffusion.schedules.DEFAULT_SAMPLERS`); these steps go with
    # a sampler given without them.
    "sampler": None,
    "sampling_steps": 20,
    "num_samples": 64,
    "jit_compile": "auto",
}
# On a CPU a folder run is short (its "tiny" U-Net trains a few thousand
# steps, not a GPU's 100k): a learning rate 10x higher, decayed to zero, and
# an EMA that forgets in ~200 steps. On 3,225 emoji at 32x32 this is 60
# epochs of 51 steps, about 20 minutes on 2 cores (docs/quality.md).
FALLBACK_CPU = {
    "epochs": 60,
    "learning_rate": 2e-3,
    "lr_schedule": "cosine",
    "ema_decay": 0.995,
}


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
        data_dir: the image folder for `"folder"` (and nothing else).
        data_path: for `"mnist"`, `"fashion_mnist"` or `"cifar10"`, an
            optional local `.npz` read instead of downloading.
        image_size: int, images are resized to `image_size x image_size`.
        channels: 1 or 3 (a folder only).
        background: a folder's colour under transparency: `"white"`,
            `"black"` or `"R,G,B"`; `None` for white (a folder only).
        resize: a folder's `"crop"`, `"pad"` or `"stretch"` for images of
            another aspect ratio; `None` for crop (a folder only).
        model_size: `"tiny"`, `"small"`, `"base"` or `"large"`: the U-Net
            (`keras_diffusion.models.unet_sizes`) for the image size; `None`
            for the preset's model, or for a folder `"tiny"` on a CPU and
            `"base"` where TensorFlow sees a GPU. `widths`,
            `num_res_blocks` and `attention_levels` override it.
        epochs: int, training epochs.
        batch_size: int, global batch size.
        learning_rate: float, Adam's (peak) learning rate.
        lr_schedule: `"constant"` or `"cosine"` (decay to 0 over the run).
        process: `"vp"` (a `keras_diffusion.NoiseSchedule`), `"edm"` (train
            the EDM way on a `keras_diffusion.EDMSchedule`; its
            preconditioning fixes what the network predicts, and the grid's
            sampler defaults to `"heun"` with 18 steps), `"flow"` (flow
            matching on a `keras_diffusion.FlowMatchSchedule`; the network
            predicts the velocity, the grid's sampler defaults to `"dpm"`
            with 16 steps), `"consistency"` (a few-step process on flow
            matching's path, `keras_diffusion.ConsistencySchedule`; the
            grid samples in 2 calls), or a process registered with
            `keras_diffusion.schedules.register_process`; `None` for the
            one `schedule` names, else `"vp"`.
        beta_schedule: a `"vp"` process's betas, see
            `keras_diffusion.NoiseSchedule`; `None` for the preset's.
        schedule: a beta schedule, or a process other than `"vp"`: what
            `process` and `beta_schedule` say in one setting (as before
            they existed); `resolve()` records the beta schedule, or the
            process's name.
        timesteps: int, T, the number of diffusion steps (with "flow", the
            timestep scale: the network gets s * T).
        beta_start: float or `None` (the schedule's default; for "linear",
            1e-4 scaled by 1000 / `timesteps`).
        beta_end: float or `None` (the schedule's default; for "linear",
            0.02 scaled by 1000 / `timesteps`).
        prediction_type: `"epsilon"`, `"v_prediction"` or `"sample"`, on
            a `"vp"` process; a process that fixes what its network
            predicts records `None`.
        sigma_data, sigma_min, sigma_max, rho, p_mean, p_std: floats, with
            `schedule="edm"` only; `None` for a run's defaults, which
            `resolve()` fills in: `EDMSchedule`'s (0.002, 80, 7, 1.2) but
            p_mean -0.6 (docs/quality.md), and sigma_data, which stays
            `None`: the data's standard deviation, measured on its first
            batches when the run is built (0.5 on latents).
        shift, timestep_sampling, logit_mean, logit_std: with
            `schedule="flow"` or `"consistency"` only; `None` for
            `FlowMatchSchedule`'s defaults (1.0, "logit_normal", 0.0, 1.0),
            which `resolve()` fills in.
        consistency_training, curriculum_steps, curriculum_stages: with
            `process="consistency"` only (with flow's settings, its training
            levels): `None` for `ConsistencySchedule`'s defaults
            ("discrete", the run's number of updates, 8).
        loss_weighting: `"none"` or `"min_snr"`.
        ema_decay: float in [0, 1).
        widths: list of ints, U-Net channels per level.
        num_res_blocks: int, residual blocks per level.
        attention_levels: list of bools, one per level.
        class_conditional: bool, train on labels (classifier-free guidance).
        class_dropout: float, label dropout for guidance.
        guidance_scale: float, guidance of the sample grid.
        mixed_precision: `"none"`, `"float16"` or `"bfloat16"`.
        jit_compile: bool or `"auto"` (XLA on, but under a strategy; see
            `DiffusionModel.compile`); `None` for the preset's (off for the
            short digits run, which XLA's compilation would make slower).
        steps_per_execution: int, or `"auto"`: 8 steps a compiled call with
            XLA or on a GPU, else 1 (see `DiffusionModel.compile`).
        grad_accum: int >= 1, batches a weight update: the optimizer
            updates once every `grad_accum` batches with their mean
            gradient (an update on `grad_accum * batch_size` images), and
            the EMA and a process's curriculum count updates.
        lora_rank: optional int >= 1: train low-rank adapters (LoRA) of
            the U-Net's convolutions, dense layers and attention
            projections, and no other weight (`keras_diffusion.enable_lora`;
            with `init_from`, or on a fresh model). `None` trains every
            weight.
        remat: bool, recompute each U-Net block in the backward pass
            instead of keeping its activations (`UNet(remat=True)`): the
            same loss and weights at lower peak memory, for more compute.
        posthoc_ema: bool, track EDM2's two power-function EMA profiles
            (sigma_rel 0.05 and 0.1) and snapshot them in `posthoc_ema/`,
            from which `keras_diffusion.posthoc_ema` makes the model of any
            other EMA length after training.
        posthoc_snapshots: int >= 1, snapshots over the run (the last at
            its end): disk use is at most `posthoc_snapshots` x 2 float32
            copies of the U-Net's weights.
        seed: int, seeds weights, noise, data order and samples.
        sampler: `"ddim"`, `"ddpm"`, `"dpm"`, `"euler"`, `"heun"`,
            `"repaint"` or `"consistency"` for the grid (and the saved
            model's `generate`); one that does not step on the process is
            refused. `None` for the preset's, else the
            process's default for the prediction type.
        sampling_steps: int, sampler steps (`"ddpm"`: up to T).
        num_samples: int, images in the final grid.
        sample_every: int, also write `samples/epoch_NNNN.png` every so many
            epochs; 0 for the final grid only.
        checkpoint_every: int, save `model.keras` every so many epochs.
        tensorboard: bool, log to `tensorboard/`.
        strategy: `"none"`, `"mirrored"` or `"multiworker"`.
        latent: `"none"` (pixel space) or `"sd-vae"`: train on the latents of
            keras-cv's Stable Diffusion VAE (8x smaller, 4 channels; RGB
            images of a size that is a multiple of 64).
        autoencoder_weights: with `latent`, `"keras-cv"` (download; the
            default), `"random"` (for tests) or `"ENC.h5,DEC.h5"` (local
            files).
        init_from: optional str, fine-tune from a checkpoint: a diffusers
            `UNet2DModel` folder or Hub id, or a `.keras` file. Its
            architecture, image size and channels are kept (a different
            `image_size` or `channels` is an error), and its schedule unless
            `schedule`, `timesteps`, `beta_start` or `beta_end` is given.
        change_schedule: bool, with `init_from`: allow `schedule` to change
            the checkpoint's kind of schedule (VP to EDM or EDM to VP), which
            calls its network on inputs it never learned. Defaults to `False`.
    """

    dataset: str = data_lib.DEFAULT_DATASET
    data_dir: str | None = None
    data_path: str | None = None
    image_size: int | None = None
    channels: int | None = None
    background: str | None = None
    resize: str | None = None
    model_size: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    lr_schedule: str | None = None
    process: str | None = None
    beta_schedule: str | None = None
    schedule: str | None = None
    timesteps: int | None = None
    beta_start: float | None = None
    beta_end: float | None = None
    prediction_type: str | None = None
    sigma_data: float | None = None
    sigma_min: float | None = None
    sigma_max: float | None = None
    rho: float | None = None
    p_mean: float | None = None
    p_std: float | None = None
    shift: float | None = None
    timestep_sampling: str | None = None
    logit_mean: float | None = None
    logit_std: float | None = None
    consistency_training: str | None = None
    curriculum_steps: int | None = None
    curriculum_stages: int | None = None
    loss_weighting: str = "none"
    ema_decay: float | None = None
    widths: list | None = None
    num_res_blocks: int | None = None
    attention_levels: list | None = None
    class_conditional: bool | None = None
    class_dropout: float | None = None
    guidance_scale: float | None = None
    mixed_precision: str = "none"
    jit_compile: bool | str | None = None
    steps_per_execution: int | str = "auto"
    grad_accum: int = 1
    lora_rank: int | None = None
    remat: bool = False
    posthoc_ema: bool = False
    posthoc_snapshots: int = 16
    seed: int = 0
    sampler: str | None = None
    sampling_steps: int | None = None
    num_samples: int | None = None
    sample_every: int = 0
    checkpoint_every: int = 5
    tensorboard: bool = False
    strategy: str = "none"
    latent: str = "none"
    autoencoder_weights: str | None = None
    init_from: str | None = None
    change_schedule: bool = False

    def resolve(self):
        """Returns a new config with every `None` filled in and all values checked."""
        check_choice("dataset", self.dataset, data_lib.DATASET_NAMES)
        if self.init_from is None:
            return self._resolve()
        if not isinstance(self.init_from, str):
            raise TypeError(
                "Argument `init_from` must be a path or a Hub id. "
                f"Received: init_from={self.init_from!r}"
            )
        checkpoint = init_from.load(self.init_from)
        config = init_from.apply(self, checkpoint)._resolve()
        # The model is built from the checkpoint loaded here (not a field:
        # config.json records its source).
        config.checkpoint = checkpoint
        return config

    def _resolve(self):
        check_choice("dataset", self.dataset, data_lib.DATASET_NAMES)
        values = dataclasses.asdict(self)
        defaults = self._defaults()
        for key, value in values.items():
            if value is None and key in defaults:
                values[key] = defaults[key]
        if self.init_from is None and (
            self.model_size is not None or self.dataset not in data_lib.PRESETS
        ):
            size = values["model_size"] = self.model_size or default_model_size()
            check_choice("model_size", size, MODEL_SIZES)
            image_size = check_int("image_size", values["image_size"], 1)
            if values["latent"] == "sd-vae":  # the U-Net runs on the latent grid
                image_size = max(1, image_size // 8)
            for key, value in unet_settings(size, image_size).items():
                if getattr(self, key) is None:
                    values[key] = value
        process_config.resolve(self, values)
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
        config_checks.check_values(config)
        config_checks.check_latent(config)
        return config

    def _defaults(self):
        """`FALLBACK` updated with the dataset's preset, if it has one (and
        with `FALLBACK_CPU` for a folder on a machine without a GPU)."""
        defaults = copy.deepcopy(FALLBACK)
        if self.dataset not in data_lib.PRESETS:
            if not gpu_present():
                defaults.update(FALLBACK_CPU)
            return defaults
        preset = data_lib.get_preset(self.dataset)
        del defaults["background"], defaults["resize"]  # a folder's only
        defaults.update(
            image_size=preset.image_size,
            channels=preset.channels,
            schedule=preset.schedule.get("beta_schedule", "linear"),
            timesteps=preset.schedule.get("num_train_timesteps", 1000),
            widths=list(preset.model["widths"]),
            num_res_blocks=preset.model["num_res_blocks"],
            attention_levels=list(preset.model["attention_levels"]),
        )
        defaults.update(copy.deepcopy(preset.training))
        # The preset's betas belong to its own schedule and T only.
        requested = self.beta_schedule or self.schedule
        if requested in (None, defaults["schedule"]) and self.timesteps in (
            None,
            defaults["timesteps"],
        ):
            defaults["beta_start"] = preset.schedule.get("beta_start")
            defaults["beta_end"] = preset.schedule.get("beta_end")
        return defaults

    def to_dict(self):
        return dataclasses.asdict(self)


def upgrade(saved):
    """A config.json of an earlier release as this one records the same run,
    so that its interrupted run resumes: a release before `process` has its
    process settings upgraded (`process_config.upgrade`), and a setting added
    since takes its default, as the runs of then had none (`grad_accum` 1,
    no few-step settings)."""
    saved = process_config.upgrade(saved)
    if saved is None:
        return None
    added = {
        field.name: field.default
        for field in dataclasses.fields(TrainConfig)
        if field.name not in saved
    }
    return {**added, **saved}
