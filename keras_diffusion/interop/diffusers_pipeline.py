"""The diffusers pipeline that runs an exported scheduler as its sampler runs.

diffusers' unconditional pipelines step a scheduler in a bare loop.
`DDPMPipeline` draws unit noise, calls `unet(x, t)` and
`scheduler.step(out, t, x, generator=...)` at each of
`scheduler.set_timesteps(num_inference_steps)`, 1,000 unless told; it never
multiplies the noise by `init_noise_sigma` nor calls `scale_model_input`.
`DDIMPipeline` is the same loop with DDIM's `eta`. So:

- `DDPMScheduler`, `DPMSolverMultistepScheduler` (its state is x_t itself)
  and the flow-matching schedulers (`init_noise_sigma` 1, no input scaling)
  run in `DDPMPipeline`, given the sampler's number of steps;
- `DDIMScheduler` runs in `DDIMPipeline`, given the steps and `eta`
  (`DDPMPipeline` would step it with `eta=0`);
- `EulerDiscreteScheduler` and `HeunDiscreteScheduler` on a VP schedule need
  both scalings, and Heun's `step` takes no generator: no unconditional
  pipeline runs them, so `to_diffusers` refuses them.
"""

import warnings

import numpy as np

from keras_diffusion.samplers import DDIMSampler

# Scheduler class -> the pipeline class that runs it as the sampler runs.
PIPELINES = {
    "DDPMScheduler": "DDPMPipeline",
    "DDIMScheduler": "DDIMPipeline",
    "DPMSolverMultistepScheduler": "DDPMPipeline",
    "FlowMatchEulerDiscreteScheduler": "DDPMPipeline",
    "FlowMatchHeunDiscreteScheduler": "DDPMPipeline",
}
# Why DDPMPipeline, the only unconditional pipeline that takes any
# scheduler, cannot run the others.
_WHY_NOT = {
    "EulerDiscreteScheduler": (
        "DDPMPipeline never scales the starting noise by its init_noise_sigma "
        "nor the model input by scale_model_input, so its images would be wrong"
    ),
    "HeunDiscreteScheduler": (
        "DDPMPipeline fails on it (HeunDiscreteScheduler.step takes no "
        "generator), and never scales the starting noise by its "
        "init_noise_sigma nor the model input by scale_model_input"
    ),
}
# The samplers whose VP exports a pipeline runs, for the refusal.
_EXPORTABLE = "'ddim', 'dpm' or 'ddpm'"


def pipeline_for(class_name, sampler, schedule):
    """The diffusers pipeline of an exported scheduler, and how to call it.

    Args:
        class_name: str, the exported scheduler's class.
        sampler: the sampler it was written from.
        schedule: the model's schedule.

    Returns:
        (pipeline class name, dict of its call arguments) that sample as
        `generate` does with `sampler`.

    Raises:
        ValueError: naming `sampler` where no diffusers pipeline runs it.
    """
    pipeline = PIPELINES.get(class_name)
    if pipeline is None:
        why = _WHY_NOT.get(class_name, "no diffusers pipeline steps it")
        raise ValueError(
            f"Argument `sampler` must be one a diffusers pipeline can run: it "
            f"exports as {class_name}, and {why}. Export with sampler="
            f"{_EXPORTABLE} (to_diffusers(model, folder, sampler='ddim')). "
            f"Received: sampler={sampler!r}"
        )
    arguments = {"num_inference_steps": sampler.steps(schedule)}
    if pipeline == "DDIMPipeline":
        arguments["eta"] = sampler.eta
    return pipeline, arguments


def warn_if_other_rule(sampler, schedule):
    """Warns when a `DDIMSampler` steps to other timesteps than the exported
    `DDIMScheduler` will (its `previous_timestep="next_listed"`)."""
    if not isinstance(sampler, DDIMSampler) or sampler.previous_timestep == (
        "diffusers"
    ):
        return
    config = {**sampler.get_config(), "previous_timestep": "diffusers"}
    theirs = DDIMSampler.from_config(config).previous_timesteps(schedule)
    if np.array_equal(sampler.previous_timesteps(schedule), theirs):
        return
    warnings.warn(
        "The exported DDIMScheduler steps from t to t - T // num_steps, and "
        "this model's DDIMSampler(previous_timestep='next_listed') to the next "
        "listed timestep, so diffusers' images differ from generate()'s: "
        "export with sampler=keras_diffusion.DDIMSampler(..., "
        "previous_timestep='diffusers') for the same images.",
        stacklevel=3,
    )


def run_line(folder, pipeline, scheduler_class, arguments):
    """The one line that says which pipeline runs the exported folder, and how."""
    call = ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return (
        f"Wrote a {pipeline} ({scheduler_class}) to {folder!r}: "
        f"diffusers.{pipeline}.from_pretrained({folder!r})(batch_size=..., "
        f"{call}) runs the sampler generate() uses."
    )
