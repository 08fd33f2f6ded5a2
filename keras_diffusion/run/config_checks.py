"""The checks of a resolved `TrainConfig`: each value, the data settings
against the dataset, the latent settings against what is installed. Each
raises a `ValueError` that names the argument (and its flag where it has
one), and stores what a check settles: ints and floats as Python's, a
folder's background by name, the autoencoder's weight source."""

import importlib.util
import os

from keras_diffusion import data as data_lib
from keras_diffusion.data import decode, keras_datasets
from keras_diffusion.distribute.strategy import STRATEGY_NAMES as STRATEGIES
from keras_diffusion.models.validation import LOSS_WEIGHTINGS
from keras_diffusion.run import keras_hub_run, process_config, text
from keras_diffusion.run.run_settings import LATENTS, LR_SCHEDULES, MIXED_PRECISION
from keras_diffusion.samplers import PREDICTION_TYPES, SAMPLERS
from keras_diffusion.schedules.registry import PROCESSES
from keras_diffusion.utils.checks import (
    check_choice,
    check_float,
    check_int,
    check_steps_per_execution,
)


def check_values(config):
    """Checks every resolved value; stores ints and floats as Python's."""
    check_data(config)
    # A keras-hub preset's model has no U-Net: no widths nor blocks.
    no_unet = config.widths is None and keras_hub_run.is_source(config.init_from)
    minimums = {
        "image_size": 1,
        "epochs": 1,
        "batch_size": 1,
        "timesteps": 2,
        "num_res_blocks": 1,
        "sampling_steps": 1,
        "num_samples": 1,
        "sample_every": 0,
        "checkpoint_every": 1,
        "seed": 0,
        "grad_accum": 1,
        "posthoc_snapshots": 1,
    }
    if no_unet:
        del minimums["num_res_blocks"]
    for name, minimum in minimums.items():
        setattr(config, name, check_int(name, getattr(config, name), minimum))
    if config.lora_rank is not None:
        config.lora_rank = check_int("lora_rank", config.lora_rank, 1)
    check_control(config)
    config.steps_per_execution = check_steps_per_execution(config.steps_per_execution)
    if config.channels not in (1, 3):
        raise ValueError(
            "Argument `channels` must be 1 or 3. "
            f"Received: channels={config.channels!r}"
        )
    if not no_unet and (
        not config.widths
        or not all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 1
            for w in config.widths
        )
    ):
        raise ValueError(
            "Argument `widths` must be a non-empty list of positive ints. "
            f"Received: widths={config.widths!r}"
        )
    config.learning_rate = check_float(
        "learning_rate", config.learning_rate, greater_than=0.0
    )
    # In [0, 1): a decay or dropout of 1 would never change anything.
    for name in ("ema_decay", "class_dropout"):
        setattr(
            config, name, check_float(name, getattr(config, name), 0.0, less_than=1.0)
        )
    config.guidance_scale = check_float("guidance_scale", config.guidance_scale)
    for name, choices in (
        ("lr_schedule", LR_SCHEDULES),
        ("process", tuple(PROCESSES)),
        ("schedule", process_config.schedule_choices()),
        ("loss_weighting", LOSS_WEIGHTINGS),
        ("mixed_precision", MIXED_PRECISION),
        ("sampler", SAMPLERS),
        ("strategy", STRATEGIES),
    ):
        check_choice(name, getattr(config, name), choices)
    if config.prediction_type is not None:
        check_choice("prediction_type", config.prediction_type, PREDICTION_TYPES)
    if config.jit_compile != "auto" and not isinstance(config.jit_compile, bool):
        raise ValueError(
            "Argument `jit_compile` must be one of True, False, 'auto'. "
            f"Received: jit_compile={config.jit_compile!r}"
        )
    if config.guidance_scale != 1.0 and not (
        config.class_conditional or text.captioned(config)
    ):
        raise ValueError(
            "Argument `guidance_scale` needs a class-conditional model "
            "(--class-conditional) or a captioned folder. Received: "
            f"guidance_scale={config.guidance_scale!r}, class_conditional=False"
        )
    if config.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ValueError(
            "Argument `tensorboard` (--tensorboard) needs the tensorboard "
            "package (pip install tensorboard). Received: tensorboard=True"
        )
    if config.sampler == "ddpm" and config.sampling_steps > config.timesteps:
        raise ValueError(
            "Argument `sampling_steps` must be at most "
            f"timesteps={config.timesteps}. "
            f"Received: sampling_steps={config.sampling_steps}"
        )


def check_control(config):
    """A ControlNet run starts from a trained U-Net and adapts nothing else."""
    if config.control is None:
        return
    if config.init_from is None or keras_hub_run.is_source(config.init_from):
        raise ValueError(
            "--control trains a ControlNet of a trained U-Net: give it with "
            "--init-from RUN (a run folder, a .keras file or a diffusers "
            f"U-Net). Received: --control {config.control}, --init-from "
            f"{config.init_from}"
        )
    if config.lora_rank is not None:
        raise ValueError(
            "--control and --lora-rank each train their own adapter; choose "
            f"one. Received: --control {config.control}, --lora-rank "
            f"{config.lora_rank}"
        )
    if config.latent != "none":
        raise ValueError(
            "--control on a latent run is not supported yet. Received: "
            f"--control {config.control}, --latent {config.latent}"
        )


def check_data(config):
    """Checks the data settings against the dataset."""
    if (config.dataset == "folder") and not config.data_dir:
        raise ValueError(
            "Argument `data_dir` (--data-dir) is required with dataset='folder'. "
            f"Received: data_dir={config.data_dir!r}"
        )
    if config.dataset != "folder" and (config.background or config.resize):
        raise ValueError(
            "Arguments `background` (--background) and `resize` (--resize) "
            "apply to an image folder (dataset='folder'). Received: "
            f"dataset={config.dataset!r}, background={config.background!r}, "
            f"resize={config.resize!r}"
        )
    if config.dataset == "folder":
        config.background = decode.background_name(config.background)
        check_choice("resize", config.resize, decode.RESIZE_MODES)
    if config.dataset != "folder" and config.data_dir:
        raise ValueError(
            "Argument `data_dir` (--data-dir) is an image folder, for "
            "dataset='folder'; a keras data set's local .npz is `data_path` "
            f"(--data-path). Received: dataset={config.dataset!r}, "
            f"data_dir={config.data_dir!r}"
        )
    if config.caption_column is not None and config.dataset != "folder":
        raise ValueError(
            "Argument `caption_column` (--caption-column) is a captioned image "
            f"folder's (dataset='folder'). Received: dataset={config.dataset!r}, "
            f"caption_column={config.caption_column!r}"
        )
    if config.data_path and config.dataset in ("digits", "folder"):
        raise ValueError(
            "Argument `data_path` (--data-path) is a keras data set's local "
            f".npz; dataset={config.dataset!r} takes none. "
            f"Received: data_path={config.data_path!r}"
        )
    if config.data_path:
        problem = keras_datasets.source_problem(config.data_path)
        if problem is not None:
            raise ValueError(
                "Argument `data_path` (--data-path) must be "
                f"{keras_datasets.LAYOUT}. Received: "
                f"data_path={config.data_path!r}, {problem}"
            )


def check_latent(config):
    """Checks the latent settings; fills in the default weight source."""
    check_choice("latent", config.latent, LATENTS)
    if config.latent == "none":
        if config.autoencoder_weights is not None:
            raise ValueError(
                "Argument `autoencoder_weights` (--autoencoder-weights) needs "
                "--latent sd-vae. "
                f"Received: autoencoder_weights={config.autoencoder_weights!r}"
            )
        return
    if importlib.util.find_spec("keras_cv") is None:
        raise ValueError(
            "Argument `latent` needs keras-cv: pip install "
            f'"keras-diffusion[keras-cv]". Received: latent={config.latent!r}'
        )
    if config.image_size % 64 or config.channels != 3:
        raise ValueError(
            "Argument `latent` needs RGB images (channels=3) of a size that "
            "is a multiple of 64. Received: "
            f"image_size={config.image_size}, channels={config.channels}"
        )
    grid, levels = config.image_size // 8, len(config.widths)
    if grid % 2 ** (levels - 1):
        raise ValueError(
            f"Argument `widths` has {levels} levels, too many for the "
            f"{grid}x{grid} latent grid of image_size={config.image_size}. "
            f"Received: widths={config.widths!r}"
        )
    weights = config.autoencoder_weights
    weights = "keras-cv" if weights is None else weights
    if weights not in ("keras-cv", "random"):
        paths = weights.split(",") if isinstance(weights, str) else []
        if len(paths) != 2 or not all(os.path.isfile(p) for p in paths):
            raise ValueError(
                "Argument `autoencoder_weights` (--autoencoder-weights) must "
                "be 'keras-cv', 'random' or two existing files "
                "'ENCODER.h5,DECODER.h5'. "
                f"Received: autoencoder_weights={weights!r}"
            )
    config.autoencoder_weights = weights


def check_recipe(dataset, recipe):
    """Checks that `recipe` is `None` or one of `dataset`'s preset's."""
    if recipe is None:
        return
    preset = data_lib.PRESETS.get(dataset)
    if preset is None:
        raise ValueError(
            "Argument `recipe` (--recipe) picks a dataset preset's settings; "
            f"dataset={dataset!r} has no preset (its defaults: docs/data.md). "
            f"Received: recipe={recipe!r}"
        )
    if recipe not in preset.recipes:
        raise ValueError(
            f"Argument `recipe` (--recipe) must be a recipe of dataset={dataset!r}: "
            f"{', '.join(repr(r) for r in preset.recipes)}. "
            f"Received: recipe={recipe!r}"
        )
