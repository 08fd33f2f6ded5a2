"""Fine-tuning keras-hub's Stable Diffusion 3 as a run:
`--init-from keras-hub:PRESET` on a captioned image folder.

The preset (a keras-hub preset name or a local preset folder, as
`from_preset` takes it) fixes the model: `keras_diffusion.from_keras_hub`
builds it, with the run's `--lora-rank`, `--remat`, caption dropout, EMA,
seed and process settings (flow matching, its shift and training density
the preset's where not given), and samples its grids with keras-hub's
sampler and guidance where none is given. The images are resized to the
preset's image size and encoded once by its VAE (their moments cached, as a
latent run's); the captions go to its frozen text encoders.

Everything is checked before the preset is loaded (the flags that describe
a model of the run's own, the data) or, what needs the preset, before
anything is written.
"""

import dataclasses
import os

import keras

from keras_diffusion import data as data_lib
from keras_diffusion.interop import keras_hub_sd3
from keras_diffusion.run import text
from keras_diffusion.run.process_config import flag, process_name, received
from keras_diffusion.run.run_settings import PRECISION_POLICIES

PREFIX = "keras-hub:"
# The settings of a model of the run's own, by the value that means "not
# given": the preset fixes the model.
FIXED = {
    "model_size": None,
    "widths": None,
    "num_res_blocks": None,
    "attention_levels": None,
    "latent": "none",
    "autoencoder_weights": None,
    "text_encoder": None,
    "text_depth": None,
    "class_conditional": None,
    "change_schedule": False,
}
# The training settings of a fine-tune where none is given: a small batch
# and a LoRA fine-tune's usual learning rate (not measured here; the
# fallback's 64 images of 1024x1024 would not fit a GPU).
DEFAULTS = {"batch_size": 4, "learning_rate": 1e-4}
# The image size's multiple: the VAE's 8 times the MMDiT's patch of 2.
SIZE_MULTIPLE = 16


def is_source(init_from):
    """Whether `init_from` names a keras-hub preset (`keras-hub:PRESET`)."""
    return isinstance(init_from, str) and init_from.startswith(PREFIX)


@dataclasses.dataclass
class Preset:
    """A loaded `keras-hub:PRESET`: what `init_from` named and its keras-hub
    `StableDiffusion3TextToImage` task."""

    source: str
    model: object


def load(config):
    """The `Preset` of `config.init_from` (a `TrainConfig`, as given), once
    every setting that needs no preset is checked.

    Raises:
        ValueError: a setting the preset fixes or the data refuse (named,
            with its value), keras-hub missing, or a preset that is neither
            keras-hub's nor a local folder.
    """
    refuse_fixed(config)
    config = refuse_data(config)
    preset = _preset_name(config.init_from)
    size = config.image_size
    if size is not None and (
        isinstance(size, bool) or not isinstance(size, int) or size % SIZE_MULTIPLE
    ):
        raise ValueError(
            f"Argument `image_size` (--image-size) of an SD3 preset must be a "
            f"multiple of {SIZE_MULTIPLE} (the VAE's 8 times the MMDiT's patch "
            f"of 2). Received: image_size={size!r}, init_from={config.init_from!r}"
        )
    keras_hub = _import_keras_hub(config.init_from)
    shape = None if size is None else {"image_shape": (size, size, 3)}
    task = _from_preset(keras_hub, preset, config.mixed_precision, shape or {})
    height, width, _ = task.backbone.image_shape
    if height != width:
        raise ValueError(
            f"Argument `init_from` holds a {height}x{width} model; training runs "
            "on square images: pass --image-size. "
            f"Received: init_from={config.init_from!r}"
        )
    return Preset(config.init_from, task)


def _from_preset(keras_hub, preset, mixed_precision, kwargs):
    """keras-hub's task of `preset`, loaded under the run's precision policy
    (`--mixed-precision`): its MMDiT takes the global policy as it loads,
    before the run sets it. The global policy is left as it was."""
    before = keras.mixed_precision.global_policy()
    policy = PRECISION_POLICIES.get(mixed_precision, before)
    keras.mixed_precision.set_global_policy(policy)
    try:
        return keras_hub.models.StableDiffusion3TextToImage.from_preset(
            preset, **kwargs
        )
    finally:
        keras.mixed_precision.set_global_policy(before)


def refuse_fixed(config):
    """Refuses a setting of a model of the run's own (a U-Net's size, a
    latent autoencoder, a text encoder, labels), a process other than the
    preset's, and channels other than 3."""
    for name, unset in FIXED.items():
        value = getattr(config, name)
        if value != unset and not (name == "class_conditional" and value is False):
            raise ValueError(
                f"Argument `{name}` ({flag(name)}) does not apply with a "
                f"keras-hub preset, which fixes the model. Received: "
                f"{name}={value!r}, init_from={config.init_from!r}"
            )
    wanted = process_name(config)
    own = keras_hub_sd3.SCHEDULE.name
    if wanted not in (None, own):
        names = ("process", "schedule", "beta_schedule")
        names = [n for n in names if getattr(config, n) is not None]
        given = " ".join(f"{flag(n)} {getattr(config, n)}" for n in names)
        raise ValueError(
            f"A keras-hub SD3 preset trains with the {own!r} process (its MMDiT "
            f"learned it); {given} does not apply. Received: "
            f"{received(config, names)}, "
            f"init_from={config.init_from!r}"
        )
    if config.strategy != "none":
        raise ValueError(
            "Argument `strategy` (--strategy) does not apply with a keras-hub "
            "preset yet: its weights are loaded outside a distribution "
            f"strategy's scope. Received: strategy={config.strategy!r}, "
            f"init_from={config.init_from!r}"
        )
    if config.channels not in (None, 3):
        raise ValueError(
            "Argument `channels` (--channels) of an SD3 preset is 3 (RGB). "
            f"Received: channels={config.channels!r}, init_from={config.init_from!r}"
        )


def refuse_data(config):
    """Refuses data other than a captioned image folder; returns `config`
    on that folder (`--data-dir` alone names it)."""
    if config.dataset == data_lib.DEFAULT_DATASET and config.data_dir:
        config = dataclasses.replace(config, dataset="folder")
    if config.dataset != "folder" or not text.captioned(config):
        raise ValueError(
            "Argument `data_dir` (--data-dir) must be a captioned image folder "
            "(its metadata.jsonl or metadata.csv: file_name and a caption "
            "each line) to fine-tune a keras-hub SD3 preset on. Received: "
            f"data_dir={config.data_dir!r}, dataset={config.dataset!r}, "
            f"caption_column={config.caption_column!r}, "
            f"init_from={config.init_from!r}"
        )
    return config


def _preset_name(init_from):
    preset = init_from[len(PREFIX) :]
    if not preset:
        raise ValueError(
            "Argument `init_from` (--init-from) must be keras-hub:PRESET, a "
            "keras-hub SD3 preset or a local preset folder after the prefix. "
            f"Received: init_from={init_from!r}"
        )
    return preset


def _import_keras_hub(init_from):
    """keras-hub, its preset checked: a name it knows or a local folder."""
    try:
        keras_hub = keras_hub_sd3.import_keras_hub()
    except ImportError:
        raise ValueError(
            "Argument `init_from` names a keras-hub preset, and keras-hub is "
            'not installed: pip install ".[keras-hub]". '
            f"Received: init_from={init_from!r}"
        ) from None
    preset = _preset_name(init_from)
    known = sorted(keras_hub.models.StableDiffusion3Backbone.presets)
    if preset not in known and not os.path.isdir(preset):
        raise ValueError(
            "Argument `init_from` (--init-from) must name a keras-hub SD3 "
            f"preset ({', '.join(known)}) or a local preset folder after "
            f"{PREFIX}. Received: init_from={init_from!r}"
        )
    return keras_hub


def apply(config, preset):
    """`config` (a `TrainConfig`, as given) with what the `Preset` fixes:
    a captioned folder of RGB images at its image size, its process (its
    settings the preset's where not given), its grids' sampler and guidance
    and the fine-tune's batch and learning rate where none is given."""
    backbone = preset.model.backbone
    schedule = keras_hub_sd3.sd3_schedule(backbone)
    defaults = keras_hub_sd3.generate_defaults()
    sampler = defaults["sampler"]
    changes = {
        "dataset": "folder",
        "image_size": int(backbone.image_shape[0]),
        "channels": 3,
        "process": schedule.name,
    }
    unset = {
        **schedule.run_values(),
        **DEFAULTS,
        "sampler": sampler.name,
        "sampling_steps": sampler.num_steps,
        "guidance_scale": defaults["guidance_scale"],
    }
    changes.update({k: v for k, v in unset.items() if getattr(config, k) is None})
    return dataclasses.replace(config, **changes)


def build_autoencoder(config):
    """The preset's VAE as the run's latent autoencoder."""
    backbone = config.checkpoint.model.backbone
    return keras_hub_sd3.sd3_autoencoder(backbone)


def build_model(config, schedule, **settings):
    """The run's `DiffusionModel` of the preset: `from_keras_hub` with the
    run's LoRA rank, remat, caption dropout and `schedule`; `settings` are
    the other `DiffusionModel` arguments (EMA, seed, sampler, ...)."""
    return keras_hub_sd3.from_keras_hub(
        config.checkpoint.model,
        lora_rank=config.lora_rank,
        remat=bool(config.remat),
        caption_dropout=config.caption_dropout,
        schedule=schedule,
        **settings,
    )
