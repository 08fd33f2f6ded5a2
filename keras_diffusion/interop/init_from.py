"""Fine-tuning from a checkpoint: `TrainConfig(init_from=...)`.

The checkpoint (a diffusers folder or Hub id, or a `.keras` file) fixes the
architecture and, unless a schedule setting is given, the schedule; the
training settings (learning rate, EMA, data) stay the run's.
"""

import dataclasses
import os

from keras_diffusion.schedules.edm_schedule import edm_kwargs
from keras_diffusion.schedules.flow_schedule import FLOW_SETTINGS, flow_kwargs
from keras_diffusion.utils import run_files

SCHEDULE_FIELDS = ("schedule", "timesteps", "beta_start", "beta_end")
ARCHITECTURE_FIELDS = ("widths", "num_res_blocks", "attention_levels")


def load(source):
    """The `DiffusionModel` of a `.keras` file, a run folder (its
    `model.keras`), a diffusers folder or a Hub id."""
    from keras_diffusion.interop.diffusers import from_diffusers
    from keras_diffusion.utils import files

    path = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if path is not None and (path.endswith(".keras") or run_files.is_run_folder(path)):
        return files.load_model(path)
    return from_diffusers(source)


def schedule_kind(schedule):
    """ "edm", "flow" or "vp": the kind of a model's schedule."""
    if hasattr(schedule, "beta_schedule"):
        return "vp"
    return "flow" if hasattr(schedule, "timestep_sampling") else "edm"


def _config_kind(name):
    return name if name in ("edm", "flow") else "vp"


_KIND_INPUTS = {
    "vp": "VP timesteps 0 to T-1 on x_t",
    "edm": "EDM's c_noise and c_in * x",
    "flow": "flow matching's s * T on (1 - s) x0 + s n, predicting the velocity",
}


def _check_schedule_kind(config, model):
    """Refuses to train a checkpoint on a schedule of another kind (VP, EDM,
    flow matching) unless `change_schedule`: the network would be called on
    other inputs than it learned (EDM's c_noise, about -1.5 to 1.2, for
    timesteps 0 to 999, and its input rescaled by c_in), or asked for
    another target, so its weights lose their meaning."""
    if config.schedule is None or getattr(config, "change_schedule", False):
        return
    trained = schedule_kind(model.schedule)
    wanted = _config_kind(config.schedule)
    if wanted == trained:
        return
    name = {
        "vp": f"VP ({getattr(model.schedule, 'beta_schedule', '')} betas)",
        "edm": "EDM",
        "flow": "flow-matching",
    }[trained]
    raise ValueError(
        f"init_from={config.init_from!r} was trained with a {name} schedule; "
        f"schedule={config.schedule!r} (--schedule) would call its network on "
        f"other inputs than it learned ({_KIND_INPUTS[wanted]}, against "
        f"{_KIND_INPUTS[trained]}), so its weights would lose their meaning. "
        "Pass change_schedule=True (--change-schedule) to train it so anyway."
    )


def apply(config, model):
    """`config` (a `TrainConfig`, before `resolve`) with the checkpoint's
    image size, channels, architecture and, when no schedule setting is
    given, schedule.

    Raises:
        ValueError: a setting contradicts the checkpoint (both named).
    """
    from keras_diffusion.models import UNet

    unet = model.denoiser
    for name, unset in (("latent", "none"), ("model_size", None)):
        value = getattr(config, name)
        if value != unset:
            raise ValueError(
                f"Argument `{name}` (--{name.replace('_', '-')}) does not apply "
                f"with init_from (the checkpoint fixes the model). Received: "
                f"{name}={value!r}, init_from={config.init_from!r}"
            )
    _check_schedule_kind(config, model)
    if not isinstance(unet, UNet) or model.autoencoder is not None:
        raise ValueError(
            "Argument `init_from` must hold a pixel-space keras_diffusion.UNet "
            f"model. Received: init_from={config.init_from!r}"
        )
    height, width, channels = unet.image_shape
    if height != width:
        raise ValueError(
            f"Argument `init_from` holds a {height}x{width} model; training runs "
            f"on square images. Received: init_from={config.init_from!r}"
        )
    for name, value in (("image_size", height), ("channels", channels)):
        given = getattr(config, name)
        if given is not None and given != value:
            raise ValueError(
                f"Argument `{name}` ({given}) differs from the checkpoint's "
                f"{name} ({value}) of init_from={config.init_from!r}; drop "
                f"--{name.replace('_', '-')} or pass {value}"
            )
    own = {
        "widths": list(unet.widths),
        "num_res_blocks": unet.num_res_blocks,
        "attention_levels": list(unet.attention_levels),
    }
    given = [
        name
        for name in ARCHITECTURE_FIELDS
        if getattr(config, name) is not None
        and list_of(getattr(config, name)) != list_of(own[name])
    ]
    if given:
        raise ValueError(
            f"Arguments {given} set an architecture, but init_from="
            f"{config.init_from!r} fixes it; drop them"
        )
    conditional = unet.num_classes is not None
    if config.class_conditional is not None and config.class_conditional != conditional:
        raise ValueError(
            f"Argument `class_conditional` ({config.class_conditional}) differs "
            f"from the checkpoint ({'conditional' if conditional else 'unconditional'}"
            f") of init_from={config.init_from!r}"
        )
    changes = {
        "image_size": height,
        "channels": channels,
        **own,
        "class_conditional": conditional,
        **_class_settings(config, unet),
    }
    schedule = model.schedule
    kind = schedule_kind(schedule)
    unset = all(getattr(config, name) is None for name in SCHEDULE_FIELDS)
    if kind != "vp" and unset:
        changes.update(schedule=kind, **_own_settings(config, schedule, kind))
    elif unset:
        changes.update(
            schedule=schedule.beta_schedule,
            timesteps=schedule.num_train_timesteps,
            beta_start=schedule.beta_start,
            beta_end=schedule.beta_end,
        )
    # A schedule of another kind (change_schedule) keeps its own target.
    other_kind = config.schedule is not None and _config_kind(config.schedule) != kind
    if config.prediction_type is None and not other_kind:
        changes["prediction_type"] = model.prediction_type
    return dataclasses.replace(config, **changes)


def _own_settings(config, schedule, kind):
    """The checkpoint's EDM or flow settings that `config` leaves unset."""
    own = schedule.get_config()
    if kind == "flow":
        own = {name: own[name] for name in FLOW_SETTINGS}
        own["timesteps"] = schedule.num_train_timesteps
    return {k: v for k, v in own.items() if getattr(config, k) is None}


def _class_settings(config, unet):
    """No label dropout nor guidance for a checkpoint without a null class
    (a diffusers model's classes are all conditional): given, they are
    refused; not given, they are off."""
    if unet.num_classes is None or unet.null_class:
        return {}
    for name, off in (("class_dropout", 0.0), ("guidance_scale", 1.0)):
        given = getattr(config, name)
        if given is not None and given != off:
            raise ValueError(
                f"Argument `{name}` needs a null class, and the checkpoint of "
                f"init_from={config.init_from!r} has none (its num_class_embeds "
                f"are all classes); drop --{name.replace('_', '-')} or pass "
                f"{off}. Received: {name}={given!r}"
            )
    return {"class_dropout": 0.0, "guidance_scale": 1.0}


def list_of(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def denoiser_and_schedule(config, num_classes, build_schedule):
    """The checkpoint's denoiser, its schedule unless the config overrides
    it, and its default sampler (a diffusers scheduler's), for a new
    `DiffusionModel` with the config's training settings (whose EMA then
    starts from the checkpoint's weights)."""
    model = load(config.init_from)
    unet = model.denoiser
    if num_classes != unet.num_classes:
        raise ValueError(
            f"The data has {num_classes or 'no'} classes but the checkpoint of "
            f"init_from={config.init_from!r} has {unet.num_classes or 'none'}"
        )
    return unet, schedule_of(config, model, build_schedule), model.sampler


def schedule_of(config, model, build_schedule):
    """The checkpoint's own schedule (trained betas, zero-SNR rescaling
    included) when the config keeps it; the config's otherwise."""
    schedule = model.schedule
    kind = schedule_kind(schedule)
    if kind != "vp":
        given = (edm_kwargs if kind == "edm" else flow_kwargs)(config.to_dict())
        own = {**schedule.get_config(), **given}
        kept = config.schedule == kind and own == schedule.get_config()
        return schedule if kept else build_schedule(config)
    kept = (
        config.schedule == schedule.beta_schedule
        and config.timesteps == schedule.num_train_timesteps
        and config.beta_start == schedule.beta_start
        and config.beta_end == schedule.beta_end
    )
    return schedule if kept else build_schedule(config)
