"""Fine-tuning from a checkpoint: `TrainConfig(init_from=...)`.

The checkpoint (a diffusers folder or Hub id, a `.keras` file or a run
folder) fixes the architecture and, unless a process setting is given, the
process; the training settings (learning rate, EMA, data) stay the run's.
The network starts from the weights the checkpoint's `generate()` uses: its
EMA where it keeps one, whatever the kind of source. The checkpoint is
loaded once a run: `TrainConfig.resolve` loads it (`load`) and the model is
built from that same checkpoint (`Checkpoint`).
"""

import dataclasses
import os

from keras_diffusion.interop.load import load as load_model
from keras_diffusion.interop.sources import is_hub_id
from keras_diffusion.models import UNet, merge_lora
from keras_diffusion.run.process_config import flag, process_name, received
from keras_diffusion.schedules.registry import PROCESSES

# The settings that choose the process or its parameters: given any, the
# checkpoint's process is not taken as it is.
SCHEDULE_FIELDS = (
    "process",
    "schedule",
    "beta_schedule",
    "timesteps",
    "beta_start",
    "beta_end",
)
ARCHITECTURE_FIELDS = ("widths", "num_res_blocks", "attention_levels")
# What `init_from` takes.
SOURCES = "a .keras file, a run folder, a diffusers folder or a Hub id"


@dataclasses.dataclass
class Checkpoint:
    """A loaded `init_from` source: its path or id and its model, whose
    denoiser holds the weights its `generate()` uses."""

    source: str
    model: object


def load(source):
    """The `Checkpoint` of `source`, its denoiser set to the EMA weights
    where the model keeps an EMA (the weights its `generate()` uses); a
    LoRA model's adapters merged into its kernels.

    Raises:
        ValueError: naming `init_from` when `source` is a file other than a
            `.keras` one, or neither an existing path nor a Hub id.
    """
    keras_file = os.path.isfile(source) and source.endswith(".keras")
    if not (keras_file or os.path.isdir(source) or is_hub_id(source)):
        missing = "" if os.path.exists(source) else "no such file or folder; "
        raise ValueError(
            f"Argument `init_from` (--init-from) must be {SOURCES} "
            f"({missing}a Hub id reads owner/name). Received: init_from={source!r}"
        )
    model = load_model(source)
    if getattr(model, "controlnet", None) is not None:
        raise ValueError(
            "Argument `init_from` (--init-from) holds a ControlNet model, whose "
            "ControlNet a new run would drop: start from the run it was trained "
            "on, or sample it (sample.py --control-images DIR). Received: "
            f"init_from={source!r}"
        )
    if model.lora is not None:
        model = merge_lora(model)
    if model.ema is not None:
        model.ema.copy_to(model.averaged_variables)
    return Checkpoint(source, model)


def _check_schedule_kind(config, model):
    """Refuses to train a checkpoint on a schedule of another kind (VP, EDM,
    flow matching) unless `change_schedule`: the network would be called on
    other inputs than it learned (EDM's c_noise, about -1.5 to 1.2, for
    timesteps 0 to 999, and its input rescaled by c_in), or asked for
    another target, so its weights lose their meaning."""
    wanted = process_name(config)
    if wanted is None or getattr(config, "change_schedule", False):
        return
    trained = model.schedule
    if wanted == trained.name:
        return
    given = [f"{flag(n)} {getattr(config, n)}" for n in ("process", "schedule")]
    given = [g for g in given if not g.endswith(" None")]
    raise ValueError(
        f"init_from={config.init_from!r} was trained with the {trained.name!r} "
        f"process; {' '.join(given)} would call its network on other inputs "
        f"than it learned ({PROCESSES[wanted].network_inputs}, against "
        f"{trained.network_inputs}), so its weights would lose their meaning. "
        "Pass change_schedule=True (--change-schedule) to train it so anyway."
    )


def apply(config, checkpoint):
    """`config` (a `TrainConfig`, before `resolve`) with the `Checkpoint`'s
    image size, channels, architecture and, when no process setting is
    given, process.

    Raises:
        ValueError: a setting contradicts the checkpoint (both named).
    """
    model = checkpoint.model
    unet = model.denoiser
    for name, unset in (("latent", "none"), ("model_size", None)):
        value = getattr(config, name)
        if value != unset:
            raise ValueError(
                f"Argument `{name}` ({flag(name)}) does not apply "
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
    _refuse_given(
        config,
        {"image_size": height, "channels": channels},
        "Argument `{name}` ({given}) differs from the checkpoint's {name} "
        "({value}) of init_from={init_from!r}; drop {flag} or pass {value}",
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
        names = ", ".join(f"`{name}` ({flag(name)})" for name in given)
        raise ValueError(
            f"Argument{'s' if len(given) > 1 else ''} {names} "
            f"set{'' if len(given) > 1 else 's'} an architecture, but init_from="
            f"{config.init_from!r} fixes it; drop "
            f"{'them' if len(given) > 1 else 'it'}. Received: {received(config, given)}"
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
    if _keeps_process(config, schedule):
        own = schedule.continued_values()
        unset = {k: v for k, v in own.items() if getattr(config, k) is None}
        changes.update(process=schedule.name, **unset)
    # A process of another kind (change_schedule) keeps its own target.
    other_kind = process_name(config) not in (None, schedule.name)
    if config.prediction_type is None and not other_kind:
        changes["prediction_type"] = model.prediction_type
    return dataclasses.replace(config, **changes)


def _keeps_process(config, schedule):
    """Whether the checkpoint's process goes on as it is: no process setting
    is given, or each one given names what the checkpoint already has
    (`--process consistency` on a consistency model changes nothing)."""
    own = {
        "process": schedule.name,
        "schedule": schedule.name,
        **schedule.run_values(),
    }
    for name in SCHEDULE_FIELDS:
        given = getattr(config, name)
        if given is None:
            continue
        if name == "schedule" and given == own.get("beta_schedule"):
            continue  # `--schedule cosine` names a VP process's betas
        if name not in own or given != own[name]:
            return False
    return True


def _class_settings(config, unet):
    """No label dropout nor guidance for a checkpoint without a null class
    (a diffusers model's classes are all conditional): given, they are
    refused; not given, they are off."""
    if unet.num_classes is None or unet.null_class:
        return {}
    off = {"class_dropout": 0.0, "guidance_scale": 1.0}
    _refuse_given(
        config,
        off,
        "Argument `{name}` needs a null class, and the checkpoint of "
        "init_from={init_from!r} has none (its num_class_embeds are all "
        "classes); drop {flag} or pass {value}. Received: {name}={given!r}",
    )
    return off


def _refuse_given(config, fixed, message):
    """Refuses a setting of `config` given other than the checkpoint fixes
    it (`fixed`: name -> value), with `message` formatted with its `name`,
    `given`, `value`, `flag` and the `init_from`."""
    for name, value in fixed.items():
        given = getattr(config, name)
        if given is not None and given != value:
            raise ValueError(
                message.format(
                    name=name,
                    given=given,
                    value=value,
                    flag=flag(name),
                    init_from=config.init_from,
                )
            )


def list_of(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def checkpoint_of(config):
    """The `Checkpoint` of a resolved config's `init_from`: the one
    `TrainConfig.resolve` loaded (`config.checkpoint`), else loaded here."""
    checkpoint = getattr(config, "checkpoint", None)
    if checkpoint is None or checkpoint.source != config.init_from:
        checkpoint = load(config.init_from)
    return checkpoint


def denoiser_and_schedule(config, num_classes, build_schedule):
    """The checkpoint's denoiser (its `generate()` weights), its process
    unless the config overrides it, and its default sampler (a diffusers
    scheduler's), for a new `DiffusionModel` with the config's training
    settings. The checkpoint is the one `TrainConfig.resolve` loaded
    (`config.checkpoint`), else loaded here."""
    model = checkpoint_of(config).model
    unet = model.denoiser
    if num_classes != unet.num_classes:
        raise ValueError(
            f"The data has {num_classes or 'no'} classes but the checkpoint of "
            f"init_from={config.init_from!r} has {unet.num_classes or 'none'}"
        )
    return unet, schedule_of(config, model, build_schedule), model.sampler


def schedule_of(config, model, build_schedule):
    """The checkpoint's own process (trained betas, zero-SNR rescaling
    included) when the config keeps its name and run settings; the
    config's otherwise."""
    schedule = model.schedule
    values = config.to_dict()
    kept = config.process == schedule.name and all(
        values[field] == value for field, value in schedule.run_values().items()
    )
    return schedule if kept else build_schedule(config)
