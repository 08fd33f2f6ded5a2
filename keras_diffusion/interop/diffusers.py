"""Load diffusers `UNet2DModel` (and `UNet2DConditionModel`) checkpoints as
`DiffusionModel`s; the export is `diffusers_export.py`.

`from_diffusers` reads a model folder (`config.json` and
`diffusion_pytorch_model.safetensors`), a pipeline folder (`model_index.json`,
`unet/`, `scheduler/`), a folder of `unet/` and `scheduler/` alone (what
`to_diffusers` writes of a cross-attention U-Net) or a Hub id. It needs no
torch. docs/interop.md maps the options, the scheduler settings and the
classes.
"""

import json
import os

from keras_diffusion import samplers
from keras_diffusion.interop import (
    diffusers_condition,
    diffusers_config,
    diffusers_scheduler,
    weights,
)
from keras_diffusion.interop.diffusers_export import WEIGHTS_NAME
from keras_diffusion.interop.sources import resolve_source
from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.samplers import DDIMSampler, DDPMSampler
from keras_diffusion.schedules.registry import PROCESSES


def _read_json(path, source):
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"Cannot read {path!r} of {source}: {error}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path!r} of {source} is not a JSON object")
    return config


def _layout(folder, source):
    """(unet folder, scheduler config path or None, the scheduler class of
    `model_index.json` or None) of a local folder."""
    if os.path.isfile(os.path.join(folder, "model_index.json")):
        index = _read_json(os.path.join(folder, "model_index.json"), source)
        unet = index.get("unet")
        if not (isinstance(unet, list) and unet[-1:] == ["UNet2DModel"]):
            raise ValueError(
                f"{source} is a {index.get('_class_name', 'diffusers')} pipeline "
                f"whose unet is {unet!r}; only UNet2DModel pipelines (DDPM, "
                "DDIM) can be loaded"
            )
        scheduler = os.path.join(folder, "scheduler", "scheduler_config.json")
        entry = index.get("scheduler")
        class_name = entry[-1] if isinstance(entry, list) and entry else None
        return (
            os.path.join(folder, "unet"),
            scheduler if os.path.isfile(scheduler) else None,
            class_name,
        )
    if os.path.isfile(os.path.join(folder, "config.json")):
        return folder, None, None
    if os.path.isfile(os.path.join(folder, "unet", "config.json")):
        # A U-Net and its scheduler without a pipeline (a cross-attention
        # U-Net's export).
        scheduler = os.path.join(folder, "scheduler", "scheduler_config.json")
        scheduler = scheduler if os.path.isfile(scheduler) else None
        return os.path.join(folder, "unet"), scheduler, None
    raise ValueError(
        f"Argument `source` is not a diffusers model or pipeline folder (it has "
        f"no model_index.json or config.json). Received: source={source}"
    )


def _read_weights(unet_folder, source, allow_pickle, variant):
    suffix = f".{variant}" if variant else ""
    safetensors_path = os.path.join(unet_folder, f"{WEIGHTS_NAME}{suffix}.safetensors")
    pickle_path = os.path.join(unet_folder, f"{WEIGHTS_NAME}{suffix}.bin")
    if os.path.isfile(safetensors_path):
        return weights.read_safetensors(safetensors_path)
    if os.path.isfile(pickle_path):
        if not allow_pickle:
            raise ValueError(
                f"{source} has only a pickled checkpoint ({pickle_path!r}), which "
                "can run code when loaded. If you trust it, convert it once to "
                "safetensors, which the scripts and from_diffusers read: in "
                "Python, keras_diffusion.to_diffusers(keras_diffusion."
                "from_diffusers(SOURCE, allow_pickle=True), NEW_FOLDER) (needs "
                "torch)."
            )
        return weights.read_pickle(pickle_path)
    raise ValueError(f"{source} has no weights file {safetensors_path!r}")


def load_checkpoint(source, allow_pickle=False, variant=None, null_class=None):
    """Reads a diffusers checkpoint without building anything.

    Returns:
        dict with `unet_kwargs`, `schedule_kwargs` (a `NoiseSchedule`'s
        include the prediction type), `prediction_type`,
        `sampler_class` and `sampler_kwargs` (the sampler of the scheduler,
        with its settings) and `tensors`.
    """
    folder, name = resolve_source(source, allow_pickle, variant)
    unet_folder, scheduler_path, scheduler_class = _layout(folder, name)
    config = _read_json(os.path.join(unet_folder, "config.json"), name)
    if config.get("_class_name") == diffusers_condition.CLASS_NAME:
        unet_kwargs = diffusers_condition.unet_kwargs(config, name)
    else:
        unet_kwargs = diffusers_config.unet_kwargs(config, name, null_class)
    scheduler = _read_json(scheduler_path, name) if scheduler_path else {}
    settings = diffusers_scheduler.read_scheduler(scheduler, name, scheduler_class)
    return {
        "source": name,
        "unet_kwargs": unet_kwargs,
        **settings,
        "tensors": _read_weights(unet_folder, name, allow_pickle, variant),
    }


def _check_conditioning(checkpoint, kwargs):
    """A `UNet2DConditionModel` needs `conditioning=`: the folder holds no
    encoder of its context."""
    dim = checkpoint["unet_kwargs"].get("cross_attention_dim")
    if dim is not None and "conditioning" not in kwargs:
        raise ValueError(
            f"{checkpoint['source']} is a UNet2DConditionModel, which attends to "
            f"a context of width {dim} that the folder holds no encoder of: "
            f"pass `conditioning=` (a text conditioning of {dim}-wide tokens) "
            "to from_diffusers. Received: no conditioning"
        )


def load_unet(checkpoint):
    """The `UNet` of a `load_checkpoint` result, with its weights: the U-Net
    part of `from_diffusers`."""
    name = checkpoint["source"]
    try:
        unet = UNet(**checkpoint["unet_kwargs"], name="unet")
    except (TypeError, ValueError) as error:
        raise ValueError(f"Cannot build the model of {name}: {error}") from None
    weights.port_weights(unet, checkpoint["tensors"], name)
    return unet


def from_diffusers(
    source,
    allow_pickle=False,
    variant=None,
    schedule=None,
    prediction_type=None,
    null_class=None,
    **kwargs,
):
    """A `DiffusionModel` from a diffusers `UNet2DModel` checkpoint (or a
    `UNet2DConditionModel` one, given `conditioning=`).

    The U-Net is built from `config.json` and its weights read from
    safetensors with NumPy (fp16 and bf16 cast to float32, old attention
    names mapped); every weight is assigned once and every tensor used once.
    The EMA starts from the loaded weights. The schedule and its prediction
    type come from the scheduler config (DDPMScheduler's defaults for a bare
    U-Net folder). The scheduler becomes the model's `sampler`, the one
    `generate` uses by default (and saves): `DDPMSampler` for a
    `DDPMScheduler` (all T steps, as `DDPMPipeline`), `DDIMSampler` for a
    `DDIMScheduler`, `DPMSolverSampler`, `EulerSampler` or `HeunSampler`
    for diffusers' DPM-Solver multistep, Euler and Heun schedulers, with
    the scheduler's spacing, offset, clipping and variance; for a number of
    steps `n` they step over the timesteps of diffusers' `set_timesteps(n)`.
    A flow-matching scheduler (`FlowMatchEulerDiscreteScheduler`,
    `FlowMatchHeunDiscreteScheduler`, or DPM-Solver with `use_flow_sigmas`)
    gives a `FlowMatchSchedule` of its `shift` and the sampler of that
    scheduler.
    A setting no sampler here implements is named in a warning.

    A `UNet2DConditionModel` that `UNet(cross_attention_dim=D)` expresses
    (docs/interop.md; the rest is refused in one line naming the options)
    needs `conditioning=` in `**kwargs`: its folder holds no text encoder.

    `num_class_embeds=N` is N classes, none of them a null class: the model
    samples each class conditionally and refuses guidance. A model that
    `to_diffusers` wrote with a null class gets it back.

    Args:
        source: str, a local model folder, a local pipeline folder, or a
            Hub id such as `"google/ddpm-cifar10-32"` (needs the `hub` extra,
            `huggingface_hub`, and a network or a filled cache).
        allow_pickle: bool, read a pickled `.bin` checkpoint when there is no
            safetensors file; it can run code, and needs torch. Defaults to
            `False`.
        variant: optional str, the weights variant (`"fp16"` reads
            `diffusion_pytorch_model.fp16.safetensors`). Defaults to `None`.
        schedule: optional `NoiseSchedule` replacing the checkpoint's; it
            takes the checkpoint's prediction type unless it holds another
            than its default (then the two must agree).
        prediction_type: optional str replacing the checkpoint's.
        null_class: optional bool, whether the last of the
            `num_class_embeds` embeddings is a null class for guidance.
            Defaults to `None`: only when `to_diffusers` wrote it so.
        **kwargs: more `DiffusionModel` arguments (`ema_decay`, `seed`, ...).

    Returns:
        a `DiffusionModel`, ready to `generate` and to `fit`.

    Example:

    ```python
    model = keras_diffusion.from_diffusers("path/to/ddpm-cifar10-32")
    images = model.generate(4, seed=0)  # DDPMPipeline's 1,000 DDPM steps
    fast = model.generate(4, sampler=keras_diffusion.interop.default_sampler(model))
    ```
    """
    if not isinstance(allow_pickle, bool):
        raise TypeError(
            f"Argument `allow_pickle` must be a bool. Received: {allow_pickle!r}"
        )
    if null_class is not None and not isinstance(null_class, bool):
        raise TypeError(
            f"Argument `null_class` must be None or a bool. Received: {null_class!r}"
        )
    checkpoint = load_checkpoint(source, allow_pickle, variant, null_class)
    name = checkpoint["source"]
    _check_conditioning(checkpoint, kwargs)
    unet = load_unet(checkpoint)
    try:
        if schedule is None:
            process = PROCESSES[checkpoint["schedule_kind"]]
            schedule = process(**checkpoint["schedule_kwargs"])
            schedule = schedule.with_objective(prediction_type)
        sampler = checkpoint["sampler_class"](**checkpoint["sampler_kwargs"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"Cannot build the model of {name}: {error}") from None
    kwargs.setdefault("sampler", sampler)
    return DiffusionModel(
        unet,
        schedule=schedule,
        prediction_type=prediction_type or checkpoint["prediction_type"],
        **kwargs,
    )


# What DDIM takes over from the model's own sampler: the settings diffusers'
# `DDIMScheduler.from_config` shares with that sampler's scheduler.
_SHARED_WITH_DDIM = {
    DDIMSampler: (
        "timestep_spacing",
        "steps_offset",
        "clip_sample",
        "clip_sample_range",
        "set_alpha_to_one",
    ),
    DDPMSampler: (
        "timestep_spacing",
        "steps_offset",
        "clip_sample",
        "clip_sample_range",
    ),
    samplers.HeunSampler: ("clip_sample", "clip_sample_range"),
}


def default_sampler(model, num_steps=50):
    """DDIM of `num_steps` with the settings of the model's own sampler that
    DDIM shares (a checkpoint scheduler's spacing, offset and clipping, for
    a model from `from_diffusers`)."""
    sampler = getattr(model, "sampler", None)
    shared = _SHARED_WITH_DDIM.get(type(sampler), ())
    config = sampler.get_config() if shared else {}
    return DDIMSampler(num_steps=num_steps, **{k: config[k] for k in shared})
