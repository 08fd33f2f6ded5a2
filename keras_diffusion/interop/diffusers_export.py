"""Export a `DiffusionModel` as a diffusers folder: `to_diffusers`.

An unconditional or class-conditional U-Net becomes a `UNet2DModel` pipeline
folder (`model_index.json`, `unet/`, `scheduler/`) that
`diffusers.DDPMPipeline.from_pretrained` loads; a cross-attention U-Net
becomes a `UNet2DConditionModel` (`unet/`) and its scheduler
(`scheduler/`), without a pipeline: the text encoder is not part of the
export. Neither needs torch. docs/interop.md maps the options.
"""

import json
import os
import warnings

from keras_diffusion import samplers
from keras_diffusion.adapters.lora_model import merge_lora
from keras_diffusion.interop import (
    diffusers_condition,
    diffusers_config,
    diffusers_pipeline,
    diffusers_scheduler,
    sd3_lora,
    weights,
)
from keras_diffusion.interop.sd3_parts import SD3Denoiser
from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.models.sampler_choice import (
    default_sampler as default_generate_sampler,
)

WEIGHTS_NAME = "diffusion_pytorch_model"


def _check_exportable(model):
    if not isinstance(model, DiffusionModel):
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={type(model).__name__}"
        )
    if not isinstance(model.denoiser, UNet):
        raise ValueError(
            "diffusers cannot express this denoiser: only a "
            "keras_diffusion.UNet exports (to UNet2DModel, or UNet2DConditionModel "
            "with cross-attention). Received: denoiser of "
            f"type {type(model.denoiser).__name__}"
        )
    if getattr(model, "controlnet", None) is not None:
        raise ValueError(
            "A ControlNet does not export to diffusers yet (no ControlNetModel "
            "folder is written), and the U-Net alone would drop it. Received: "
            f"model with controlnet={model.controlnet.name!r}"
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
    # The averages cover the model's `averaged_variables`: the denoiser's
    # weights and then a text encoder's, which is not exported.
    return {
        id(variable): value
        for variable, value in zip(
            model.averaged_variables, model.ema.values(), strict=True
        )
    }


def unet_files(unet, values=None):
    """`(class name, config, tensors)` of `unet` as a diffusers model:
    `UNet2DConditionModel` with cross-attention, else `UNet2DModel`; the
    weights are the variables', or `values` (variable id -> array) where
    given.

    Raises:
        ValueError: in one line, what diffusers cannot express.
    """
    if getattr(unet, "cross_attention_dim", None) is not None:
        class_name = diffusers_condition.CLASS_NAME
        config = diffusers_condition.unet_config(unet)
    else:
        class_name, config = "UNet2DModel", diffusers_config.unet_config(unet)
    return class_name, config, weights.export_weights(unet, values)


def _write_folder(folder, tensors, files):
    """Writes the U-Net's safetensors and the JSON `files` (path: content)
    under `folder`."""
    for path in files:
        os.makedirs(os.path.join(folder, os.path.dirname(path)), exist_ok=True)
    os.makedirs(os.path.join(folder, "unet"), exist_ok=True)
    weights.write_safetensors(
        tensors, os.path.join(folder, "unet", f"{WEIGHTS_NAME}.safetensors")
    )
    for path, content in files.items():
        with open(os.path.join(folder, path), "w", encoding="utf-8") as file:
            json.dump(content, file, indent=2)


def write_unet(unet, folder, values=None):
    """Writes `unet` as a diffusers model under `folder/unet` (config and
    safetensors), the U-Net part of `to_diffusers`' folder.

    Returns:
        the diffusers class name written.
    """
    class_name, config, tensors = unet_files(unet, values)
    _write_folder(
        os.fspath(folder), tensors, {os.path.join("unet", "config.json"): config}
    )
    return class_name


def _pipeline(model, sampler, scheduler_class):
    """`(pipeline class, its call's arguments)` that runs the export, or
    `(None, None)` for a cross-attention U-Net, which no pipeline runs
    without its text encoder."""
    if getattr(model.denoiser, "cross_attention_dim", None) is not None:
        return None, None
    found = diffusers_pipeline.pipeline_for(scheduler_class, sampler, model.schedule)
    diffusers_pipeline.warn_if_other_rule(sampler, model.schedule)
    return found


def _line(folder, pipeline, scheduler_class, arguments):
    """The printed line: which pipeline runs the folder, or how to call the
    cross-attention U-Net."""
    if pipeline is not None:
        return diffusers_pipeline.run_line(folder, pipeline, scheduler_class, arguments)
    return (
        f"Wrote a diffusers UNet2DConditionModel and its scheduler to {folder!r} "
        "(no pipeline: the text encoder is not exported): "
        f"diffusers.UNet2DConditionModel.from_pretrained({folder!r}, "
        "subfolder='unet')(x, t, encoder_hidden_states=context, "
        "class_labels=context.mean(1))."
    )


def _sd3_lora(model, folder, use_ema, scheduler, verbose):
    """An SD3 model of `from_keras_hub`: its LoRA as a diffusers LoRA file;
    `scheduler`, the scheduler's arguments given (none apply)."""
    given = {name: value for name, value in scheduler.items() if value is not None}
    if given:
        raise ValueError(
            "An SD3 model exports its LoRA alone, with no scheduler: "
            f"{', '.join(f'`{name}`' for name in given)} do not apply. Received: "
            + ", ".join(f"{name}={value!r}" for name, value in given.items())
        )
    _check_arguments(folder, use_ema, verbose)
    return sd3_lora.write_lora(model, folder, use_ema, verbose)


def _check_arguments(folder, use_ema, verbose):
    if not isinstance(use_ema, bool):
        raise TypeError(f"Argument `use_ema` must be a bool. Received: {use_ema!r}")
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"Argument `folder` must be a path. Received: {folder!r}")
    if verbose not in (0, 1) or isinstance(verbose, bool):
        raise ValueError(f"Argument `verbose` must be 0 or 1. Received: {verbose!r}")


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
    `diffusers.DDPMPipeline.from_pretrained` loads either. A U-Net with
    cross-attention (`cross_attention_dim`) is written as a diffusers
    `UNet2DConditionModel` (`unet/`) beside its scheduler, with no
    `model_index.json`: no diffusers pipeline runs it without the text
    encoder, which is not exported; diffusers' caller passes the context as
    `encoder_hidden_states` and its mean over the tokens as `class_labels`
    (the pooled context's projection, `class_embed_type="projection"`).
    Euler and Heun on
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

    An SD3 model of `from_keras_hub` writes its LoRA alone, diffusers' PEFT
    file (`keras_diffusion.interop.sd3_lora.write_lora`).
    """
    if isinstance(getattr(model, "denoiser", None), SD3Denoiser):
        scheduler = dict(sampler=sampler, clip_sample=clip_sample)
        scheduler["clip_sample_range"] = clip_sample_range
        return _sd3_lora(model, folder, use_ema, scheduler, verbose)
    _check_exportable(model)
    _check_arguments(folder, use_ema, verbose)
    clip = {"clip_sample": clip_sample, "clip_sample_range": clip_sample_range}
    sampler, scheduler_class, scheduler = _export_scheduler(model, sampler, clip)
    pipeline, arguments = _pipeline(model, sampler, scheduler_class)
    if model.lora is not None:
        model = merge_lora(model, use_ema)
    unet = model.denoiser
    class_name, unet_config, tensors = unet_files(unet, _ema_values(model, use_ema))
    files = {
        os.path.join("unet", "config.json"): unet_config,
        os.path.join("scheduler", "scheduler_config.json"): scheduler,
    }
    if pipeline is not None:
        files["model_index.json"] = {
            "_class_name": pipeline,
            "_diffusers_version": diffusers_config.DIFFUSERS_VERSION,
            "scheduler": ["diffusers", scheduler_class],
            "unet": ["diffusers", class_name],
        }
    _warn_class_labels(unet)
    folder = os.fspath(folder)
    _write_folder(folder, tensors, files)
    if verbose:
        print(_line(folder, pipeline, scheduler_class, arguments), flush=True)
    return folder
