"""diffusers scheduler configs <-> `NoiseSchedule` (with its prediction type)
and sampler.

Five diffusers schedulers have a sampler here that steps over the same
timesteps with the same update: `DDPMScheduler` (`DDPMSampler`),
`DDIMScheduler` (`DDIMSampler`), `DPMSolverMultistepScheduler`
(`DPMSolverSampler`), `EulerDiscreteScheduler` (`EulerSampler`) and
`HeunDiscreteScheduler` (`HeunSampler`). A scheduler config gives the noise
schedule of the model, its prediction type included (a `NoiseSchedule`
holds it as a diffusers scheduler does), and the sampler with the
scheduler's options that `generate` uses by default; the sampler's own
settings that no scheduler config holds (its number of steps, DDIM's `eta`)
travel under the private key `_keras_diffusion`, which diffusers ignores.
A setting none of our samplers implements is named in a warning, never
dropped in silence.
"""

import inspect
import math
import warnings

from keras_diffusion.interop import diffusers_flow
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
)

DIFFUSERS_VERSION = "0.30.0"
PRIVATE_KEY = "_keras_diffusion"
# The keys of every scheduler config that define the noise process.
_SCHEDULE_DEFAULTS = {
    "num_train_timesteps": 1000,
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "trained_betas": None,
    "prediction_type": "epsilon",
    "rescale_betas_zero_snr": False,
}
_NO_THRESHOLDING = {"thresholding": False}


class _Scheduler:
    """A diffusers scheduler class as one of our samplers expresses it.

    Args:
        sampler: the sampler class.
        options: dict of the scheduler config's sampler options (the same
            names as the sampler's arguments) to diffusers' defaults.
        fixed: dict of the config keys the sampler implements at one value
            only (diffusers' default) to that value.
        schedule: dict of the schedule keys whose defaults differ from
            DDPMScheduler's.
        zero_snr: bool, whether the config has `rescale_betas_zero_snr`.
        implied: dict of the sampler options that are the scheduler's own
            rule at one value (no config key holds them) to that value; only
            another value travels under the private key.
    """

    def __init__(
        self, sampler, options, fixed, schedule=None, zero_snr=True, implied=None
    ):
        self.sampler = sampler
        self.options = options
        self.fixed = fixed
        self.schedule = {**_SCHEDULE_DEFAULTS, **(schedule or {})}
        self.zero_snr = zero_snr
        self.implied = implied or {}


SCHEDULERS = {
    "DDPMScheduler": _Scheduler(
        DDPMSampler,
        {
            "timestep_spacing": "leading",
            "steps_offset": 0,
            "variance_type": "fixed_small",
            "clip_sample": True,
            "clip_sample_range": 1.0,
        },
        _NO_THRESHOLDING,
    ),
    "DDIMScheduler": _Scheduler(
        DDIMSampler,
        {
            "timestep_spacing": "leading",
            "steps_offset": 0,
            "clip_sample": True,
            "clip_sample_range": 1.0,
            "set_alpha_to_one": True,
        },
        _NO_THRESHOLDING,
        # DDIMScheduler.step lands on t - T // n: DDIMSampler's default.
        implied={"previous_timestep": "diffusers"},
    ),
    "DPMSolverMultistepScheduler": _Scheduler(
        DPMSolverSampler,
        {
            "timestep_spacing": "linspace",
            "steps_offset": 0,
            "use_karras_sigmas": False,
            "final_sigmas_type": "zero",
            "lower_order_final": True,
        },
        {
            **_NO_THRESHOLDING,
            "solver_order": 2,
            "algorithm_type": "dpmsolver++",
            "solver_type": "midpoint",
            "euler_at_final": False,
            "use_exponential_sigmas": False,
            "use_beta_sigmas": False,
            "use_lu_lambdas": False,
            "use_flow_sigmas": False,
            "lambda_min_clipped": -math.inf,
            "variance_type": None,
            "use_dynamic_shifting": False,
        },
    ),
    "EulerDiscreteScheduler": _Scheduler(
        EulerSampler,
        {"timestep_spacing": "linspace", "steps_offset": 0, "use_karras_sigmas": False},
        {
            "interpolation_type": "linear",
            "use_exponential_sigmas": False,
            "use_beta_sigmas": False,
            "sigma_min": None,
            "sigma_max": None,
            "timestep_type": "discrete",
            "final_sigmas_type": "zero",
        },
    ),
    "HeunDiscreteScheduler": _Scheduler(
        HeunSampler,
        {
            "timestep_spacing": "linspace",
            "steps_offset": 0,
            "use_karras_sigmas": False,
            "clip_sample": False,
            "clip_sample_range": 1.0,
        },
        {"use_exponential_sigmas": False, "use_beta_sigmas": False},
        # Its own betas (Stable Diffusion's); it has no zero-SNR rescaling.
        {"beta_start": 0.00085, "beta_end": 0.012},
        zero_snr=False,
    ),
}
_CLASS_OF_SAMPLER = {spec.sampler: name for name, spec in SCHEDULERS.items()}
# The options each sampler takes with the choices it implements, where
# diffusers knows more.
_CHOICES = {
    "variance_type": ("fixed_small", "fixed_small_log", "fixed_large"),
    "final_sigmas_type": ("zero", "sigma_min"),
}


def _differs(value, default):
    if isinstance(value, float) and isinstance(default, float):
        return not (value == default or (math.isnan(value) and math.isnan(default)))
    return value != default


def schedule_settings(config, spec):
    """The `NoiseSchedule` arguments of a scheduler config, its prediction
    type included."""
    c = {**spec.schedule, **config}
    beta_schedule = c["beta_schedule"]
    if beta_schedule == "squaredcos_cap_v2":
        beta_schedule = "cosine"
    trained = c["trained_betas"]
    if trained is not None:
        trained = [float(b) for b in trained]
    schedule_kwargs = {
        "num_train_timesteps": int(c["num_train_timesteps"]),
        "beta_schedule": beta_schedule,
        "beta_start": float(c["beta_start"]),
        "beta_end": float(c["beta_end"]),
        "rescale_zero_terminal_snr": bool(c["rescale_betas_zero_snr"]),
        "trained_betas": trained,
        "prediction_type": c["prediction_type"],
    }
    return schedule_kwargs


def read_scheduler(config, source, class_name=None):
    """What a diffusers scheduler config says, for `from_diffusers`.

    Args:
        config: dict, the scheduler config (`{}` for a bare U-Net folder,
            which diffusers samples with `DDPMScheduler`'s defaults).
        source: str, the checkpoint's name, for the messages.
        class_name: optional str, the scheduler class of the pipeline's
            `model_index.json`, when the config does not name one.

    Returns:
        dict with `schedule_kind` (`"vp"`, or `"flow"` for a flow-matching
        scheduler, `keras_diffusion.interop.diffusers_flow`),
        `schedule_kwargs` (the process's arguments: a `NoiseSchedule`'s
        include the prediction type), `prediction_type` (the network's, as
        the config says), `sampler_class` and `sampler_kwargs`. Settings no
        sampler here implements are named in a `UserWarning`; the sampler
        then runs without them.
    """
    name = config.get("_class_name") or class_name or "DDPMScheduler"
    if diffusers_flow.is_flow_config(config, name):
        return diffusers_flow.read(config, source, name)
    spec = SCHEDULERS.get(name)
    ignored = []
    if spec is None:
        spec = SCHEDULERS["DDIMScheduler"]
        ignored.append(f"the class {name} (sampled with DDIMSampler instead)")
    schedule_kwargs = schedule_settings(config, spec)
    kwargs = {}
    for key, default in spec.options.items():
        value = config.get(key, default)
        if key in _CHOICES and value not in _CHOICES[key]:
            ignored.append(f"{key}={value!r} (sampled with {default!r})")
            value = default
        kwargs[key] = value
    for key, default in spec.fixed.items():
        if key in config and _differs(config[key], default):
            ignored.append(f"{key}={config[key]!r} (sampled with {default!r})")
    extras = config.get(PRIVATE_KEY) or {}
    accepted = inspect.signature(spec.sampler).parameters
    kwargs.update({k: v for k, v in extras.items() if k in accepted})
    if ignored:
        warnings.warn(
            f"{source}'s scheduler sets what keras_diffusion's samplers do not "
            f"implement: {', '.join(ignored)}. The model's default sampler, "
            f"{spec.sampler.__name__}, runs without it, and to_diffusers "
            "writes what it runs.",
            stacklevel=4,
        )
    return {
        "schedule_kind": "vp",
        "schedule_kwargs": schedule_kwargs,
        "prediction_type": schedule_kwargs["prediction_type"],
        "sampler_class": spec.sampler,
        "sampler_kwargs": kwargs,
    }


def _schedule_config(schedule, spec, class_name):
    """The noise-process keys of a scheduler config."""
    beta_schedule = schedule.beta_schedule
    if beta_schedule == "cosine":
        beta_schedule = "squaredcos_cap_v2"
    config = {
        "num_train_timesteps": schedule.num_train_timesteps,
        "beta_start": schedule.beta_start,
        "beta_end": schedule.beta_end,
        "beta_schedule": beta_schedule,
        "trained_betas": schedule.trained_betas,
        "prediction_type": schedule.prediction_type,
    }
    if spec.zero_snr:
        config["rescale_betas_zero_snr"] = schedule.rescale_zero_terminal_snr
    elif schedule.rescale_zero_terminal_snr:
        raise ValueError(
            f"diffusers' {class_name} has no rescale_betas_zero_snr, so it "
            "cannot sample this zero-terminal-SNR schedule; export with "
            "another sampler (to_diffusers(..., sampler=...)). Received: "
            "rescale_zero_terminal_snr=True"
        )
    return config


def scheduler_config(schedule, sampler, clip=None):
    """The diffusers scheduler config of a model's schedule (its prediction
    type included) and sampler.

    Args:
        schedule: the model's `NoiseSchedule` or `FlowMatchSchedule`.
        sampler: the sampler to write as its scheduler.
        clip: optional dict of `clip_sample` and `clip_sample_range` values
            that replace the sampler's (`None` values keep them).

    Returns:
        (class name, config dict).

    Raises:
        ValueError: naming what the scheduler class cannot hold.
    """
    export = _EXPORTS.get(schedule.name)
    if export is None:
        raise ValueError(
            f"diffusers has no scheduler for the {schedule.name!r} process "
            f"({type(schedule).__name__}); the processes that export: "
            + ", ".join(repr(name) for name in _EXPORTS)
            + f". Received: schedule={schedule!r}"
        )
    return export(schedule, sampler, clip)


def exports(schedule):
    """Whether diffusers has a scheduler for `schedule`'s process."""
    return schedule.name in _EXPORTS


def _vp_scheduler_config(schedule, sampler, clip):
    """`scheduler_config` of a VP process (`NoiseSchedule`)."""
    class_name = _CLASS_OF_SAMPLER.get(type(sampler))
    if class_name is None:
        raise ValueError(
            "diffusers has no scheduler for this sampler; export with one of "
            + ", ".join(s.__name__ for s in _CLASS_OF_SAMPLER)
            + f". Received: sampler={sampler!r}"
        )
    spec = SCHEDULERS[class_name]
    own = sampler.get_config()
    for key, value in (clip or {}).items():
        if value is None:
            continue
        if key not in spec.options:
            raise ValueError(
                f"Argument `{key}` does not apply: diffusers' {class_name} has no "
                f"such setting. Received: {key}={value!r}"
            )
        own[key] = value
    config = {
        "_class_name": class_name,
        "_diffusers_version": DIFFUSERS_VERSION,
        **_schedule_config(schedule, spec, class_name),
        **spec.fixed,
        **{key: own[key] for key in spec.options},
    }
    extras = {
        k: v
        for k, v in own.items()
        if k not in spec.options and (k not in spec.implied or spec.implied[k] != v)
    }
    config[PRIVATE_KEY] = extras
    return class_name, config


# The scheduler config of each process diffusers has schedulers for, by the
# process's name (`keras_diffusion.schedules.Process.name`).
_EXPORTS = {
    "vp": _vp_scheduler_config,
    "flow": lambda schedule, sampler, clip: diffusers_flow.scheduler_config(
        schedule, sampler
    ),
}
