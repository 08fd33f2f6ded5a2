"""Load diffusers `UNet2DModel` checkpoints as `DiffusionModel`s, and export.

`from_diffusers` reads a model folder (`config.json` and
`diffusion_pytorch_model.safetensors`), a pipeline folder (`model_index.json`,
`unet/`, `scheduler/`) or a Hub id; `to_diffusers` writes a pipeline folder
(`DDPMPipeline` or `DDIMPipeline`) that `diffusers.DDPMPipeline.from_pretrained`
loads. Neither needs torch. docs/interop.md maps the options, the scheduler
settings and the classes, and says how to run an export.
"""

import json
import os
import warnings

from keras_diffusion import samplers
from keras_diffusion.adapters.lora_model import merge_lora
from keras_diffusion.interop import (
    diffusers_config,
    diffusers_pipeline,
    diffusers_scheduler,
    weights,
)
from keras_diffusion.interop.sources import resolve_source
from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.models.sampling import default_sampler as default_generate_sampler
from keras_diffusion.samplers import DDIMSampler, DDPMSampler
from keras_diffusion.schedules.registry import PROCESSES

WEIGHTS_NAME = "diffusion_pytorch_model"


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
    unet_kwargs = diffusers_config.unet_kwargs(config, name, null_class)
    scheduler = _read_json(scheduler_path, name) if scheduler_path else {}
    settings = diffusers_scheduler.read_scheduler(scheduler, name, scheduler_class)
    return {
        "source": name,
        "unet_kwargs": unet_kwargs,
        **settings,
        "tensors": _read_weights(unet_folder, name, allow_pickle, variant),
    }


def from_diffusers(
    source,
    allow_pickle=False,
    variant=None,
    schedule=None,
    prediction_type=None,
    null_class=None,
    **kwargs,
):
    """A `DiffusionModel` from a diffusers `UNet2DModel` checkpoint.

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
    try:
        unet = UNet(**checkpoint["unet_kwargs"], name="unet")
        if schedule is None:
            process = PROCESSES[checkpoint["schedule_kind"]]
            schedule = process(**checkpoint["schedule_kwargs"])
            schedule = schedule.with_objective(prediction_type)
        sampler = checkpoint["sampler_class"](**checkpoint["sampler_kwargs"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"Cannot build the model of {name}: {error}") from None
    weights.port_weights(unet, checkpoint["tensors"], name)
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


def _check_exportable(model):
    if not isinstance(model, DiffusionModel):
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={type(model).__name__}"
        )
    if not isinstance(model.denoiser, UNet):
        raise ValueError(
            "diffusers cannot express this denoiser: only a "
            "keras_diffusion.UNet exports to UNet2DModel. Received: denoiser of "
            f"type {type(model.denoiser).__name__}"
        )
    if model.autoencoder is not None:
        raise ValueError(
            "A latent diffusion model (with an autoencoder) does not fit "
            "DDPMPipeline; only pixel-space models export"
        )
    if not diffusers_scheduler.exports(model.schedule):
        raise ValueError(
            "Only a NoiseSchedule or FlowMatchSchedule exports to a diffusers "
            f"scheduler: diffusers has none for the {model.schedule.name!r} "
            f"process. Received: schedule of type {type(model.schedule).__name__}"
        )


def _export_scheduler(model, sampler, clip):
    """(sampler, scheduler class name, scheduler config) to write: `sampler`,
    else the one `generate` uses by default."""
    if sampler is None:
        sampler = model.sampler or default_generate_sampler(
            model.schedule, model.schedule.prediction_type
        )
    sampler = samplers.get(sampler)
    class_name, config = diffusers_scheduler.scheduler_config(
        model.schedule, sampler, clip
    )
    # What diffusers cannot run is refused here, before anything is written.
    sampler.validate(model.schedule)
    return sampler, class_name, config


def _warn_class_labels(unet):
    if unet.num_classes is None:
        return
    warnings.warn(
        "The exported U-Net is class-conditional, and diffusers' DDPMPipeline "
        "cannot pass class labels (nor can DDIMPipeline; they fail with "
        "'class_labels should be provided'): sample it with UNet2DModel(x, t, "
        "class_labels) in a loop of your own, as docs/interop.md shows.",
        stacklevel=3,
    )


def _ema_values(model, use_ema):
    """The EMA weights by variable id, or `None` for the live weights."""
    if not (use_ema and model.ema is not None):
        return None
    unet = model.denoiser
    return {
        id(variable): value
        for variable, value in zip(
            unet.trainable_variables, model.ema.values(), strict=True
        )
    }


def _write_folder(folder, tensors, files):
    """Writes the safetensors and the JSON `files` (path: content) under
    `folder`."""
    for sub in ("unet", "scheduler"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    weights.write_safetensors(
        tensors, os.path.join(folder, "unet", f"{WEIGHTS_NAME}.safetensors")
    )
    for path, content in files.items():
        with open(os.path.join(folder, path), "w", encoding="utf-8") as file:
            json.dump(content, file, indent=2)


def to_diffusers(
    model,
    folder,
    use_ema=True,
    clip_sample=None,
    clip_sample_range=None,
    sampler=None,
    verbose=1,
):
    """Writes a diffusers pipeline folder of a `DiffusionModel`.

    The folder holds `model_index.json`, `unet/` (config and safetensors,
    float32) and `scheduler/`: the diffusers scheduler of the sampler that
    `generate` uses by default (the model's `sampler`, else its schedule's
    default), with the schedule, the prediction type and the sampler's
    settings; what no scheduler config holds (the number of steps, DDIM's
    `eta`) is kept under its private key `_keras_diffusion` for
    `from_diffusers`. A model on a `FlowMatchSchedule` gets the
    flow-matching scheduler of its sampler.

    The pipeline class is the one that runs that scheduler as `generate`
    runs the sampler: `DDIMPipeline` for DDIM (it passes `eta`),
    `DDPMPipeline` for DDPM, DPM-Solver and the flow-matching schedulers.
    `diffusers.DDPMPipeline.from_pretrained` loads either. Euler and Heun on
    a VP schedule are refused: `DDPMPipeline` never applies their
    `init_noise_sigma` and `scale_model_input`, and no other unconditional
    pipeline steps them. One printed line says which pipeline and how to
    call it (its `num_inference_steps`); docs/interop.md, "Running an
    export in diffusers". A class-conditional model's null class stays the
    last of its `num_class_embeds`; as the pipelines cannot pass labels, its
    export warns. Everything is checked and converted before anything is
    written.

    Args:
        model: a `DiffusionModel` whose denoiser is a `keras_diffusion.UNet`.
        folder: str, the folder to write (created if needed).
        use_ema: bool, export the EMA weights when the model keeps them.
            Defaults to `True`. A LoRA model's adapters are merged into
            its kernels (`merge_lora`, with the EMA's factors when
            `use_ema`).
        clip_sample: optional bool, the scheduler's `clip_sample` (DDPM,
            DDIM and Heun). Defaults to the sampler's.
        clip_sample_range: optional float. Defaults to the sampler's.
        sampler: optional sampler (or its name) to write as the scheduler
            instead of the model's. Defaults to `None`.
        verbose: 0 or 1: print the line naming the pipeline. Defaults to
            `1`.

    Returns:
        the folder.

    Example:

    ```python
    keras_diffusion.to_diffusers(model, "exported")  # DDIM-50: a DDIMPipeline
    pipeline = diffusers.DDIMPipeline.from_pretrained("exported")
    images = pipeline(batch_size=4, num_inference_steps=50, eta=0.0).images
    ```
    """
    _check_exportable(model)
    if not isinstance(use_ema, bool):
        raise TypeError(f"Argument `use_ema` must be a bool. Received: {use_ema!r}")
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"Argument `folder` must be a path. Received: {folder!r}")
    if verbose not in (0, 1) or isinstance(verbose, bool):
        raise ValueError(f"Argument `verbose` must be 0 or 1. Received: {verbose!r}")
    clip = {"clip_sample": clip_sample, "clip_sample_range": clip_sample_range}
    sampler, scheduler_class, scheduler = _export_scheduler(model, sampler, clip)
    pipeline, arguments = diffusers_pipeline.pipeline_for(
        scheduler_class, sampler, model.schedule
    )
    diffusers_pipeline.warn_if_other_rule(sampler, model.schedule)
    if model.lora is not None:
        model = merge_lora(model, use_ema)
    unet = model.denoiser
    unet_config = diffusers_config.unet_config(unet)
    tensors = weights.export_weights(unet, _ema_values(model, use_ema))
    index = {
        "_class_name": pipeline,
        "_diffusers_version": diffusers_config.DIFFUSERS_VERSION,
        "scheduler": ["diffusers", scheduler_class],
        "unet": ["diffusers", "UNet2DModel"],
    }
    _warn_class_labels(unet)
    folder = os.fspath(folder)
    _write_folder(
        folder,
        tensors,
        {
            "model_index.json": index,
            os.path.join("unet", "config.json"): unet_config,
            os.path.join("scheduler", "scheduler_config.json"): scheduler,
        },
    )
    if verbose:
        line = diffusers_pipeline.run_line(folder, pipeline, scheduler_class, arguments)
        print(line, flush=True)
    return folder
