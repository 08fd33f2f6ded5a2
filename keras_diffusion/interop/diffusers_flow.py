"""diffusers flow-matching scheduler configs <-> `FlowMatchSchedule` and sampler.

Three diffusers schedulers step a flow-matching model as a sampler here
does: `FlowMatchEulerDiscreteScheduler` (`EulerSampler`),
`FlowMatchHeunDiscreteScheduler` (`HeunSampler`) and
`DPMSolverMultistepScheduler` with `use_flow_sigmas=True` and
`prediction_type="flow_prediction"` (`DPMSolverSampler`). Their `shift`
(`flow_shift`) and `num_train_timesteps` are the schedule's; the training
settings no scheduler config holds (`timestep_sampling`, the logit-normal
mean and std, SD3's mode scale) and the sampler's number of steps travel
under the private key `_keras_diffusion`, as for the VP schedulers. A setting
none of our samplers implements is named in a warning.
"""

import inspect
import warnings

from keras_diffusion.samplers import DPMSolverSampler, EulerSampler, HeunSampler

PRIVATE_KEY = "_keras_diffusion"
DIFFUSERS_VERSION = "0.30.0"
_DPM = "DPMSolverMultistepScheduler"
CLASSES = {
    "FlowMatchEulerDiscreteScheduler": EulerSampler,
    "FlowMatchHeunDiscreteScheduler": HeunSampler,
    _DPM: DPMSolverSampler,
}
_CLASS_OF_SAMPLER = {sampler: name for name, sampler in CLASSES.items()}
# The config keys our samplers implement at one value only (diffusers'
# default), by class.
_FIXED = {
    "FlowMatchEulerDiscreteScheduler": {
        "use_dynamic_shifting": False,
        "invert_sigmas": False,
        "shift_terminal": None,
        "use_karras_sigmas": False,
        "use_exponential_sigmas": False,
        "use_beta_sigmas": False,
        "stochastic_sampling": False,
    },
    "FlowMatchHeunDiscreteScheduler": {},
    _DPM: {
        "solver_order": 2,
        "algorithm_type": "dpmsolver++",
        "solver_type": "midpoint",
        "final_sigmas_type": "zero",
        "use_karras_sigmas": False,
        "use_dynamic_shifting": False,
        "thresholding": False,
        "euler_at_final": False,
    },
}
# The schedule's own settings, kept privately.
_TRAINING = ("timestep_sampling", "logit_mean", "logit_std", "mode_scale")


def is_flow_config(config, class_name):
    """Whether a scheduler config of `class_name` steps a flow-matching model."""
    if class_name == _DPM:
        return bool(config.get("use_flow_sigmas", False))
    return class_name in CLASSES


def read(config, source, class_name):
    """What a flow-matching scheduler config says (see
    `diffusers_scheduler.read_scheduler`): the `FlowMatchSchedule`
    arguments and the sampler with its settings."""
    ignored = [
        f"{key}={config[key]!r} (sampled with {default!r})"
        for key, default in _FIXED[class_name].items()
        if key in config and config[key] != default
    ]
    shift_key = "flow_shift" if class_name == _DPM else "shift"
    if class_name == _DPM and config.get("prediction_type") != "flow_prediction":
        ignored.append(
            f"prediction_type={config.get('prediction_type')!r} with "
            "use_flow_sigmas (read as 'flow_prediction')"
        )
    extras = config.get(PRIVATE_KEY) or {}
    schedule_kwargs = {
        "num_train_timesteps": int(config.get("num_train_timesteps", 1000)),
        "shift": float(config.get(shift_key, 1.0)),
        **{k: extras[k] for k in _TRAINING if k in extras},
    }
    sampler_class = CLASSES[class_name]
    accepted = inspect.signature(sampler_class).parameters
    sampler_kwargs = {k: v for k, v in extras.items() if k in accepted}
    if class_name == _DPM and "lower_order_final" in config:
        sampler_kwargs["lower_order_final"] = bool(config["lower_order_final"])
    if ignored:
        warnings.warn(
            f"{source}'s scheduler sets what keras_diffusion's samplers do not "
            f"implement: {', '.join(ignored)}. The model's default sampler, "
            f"{sampler_class.__name__}, runs without it, and to_diffusers "
            "writes what it runs.",
            stacklevel=5,
        )
    return {
        "schedule_kind": "flow",
        "schedule_kwargs": schedule_kwargs,
        "prediction_type": "epsilon",
        "sampler_class": sampler_class,
        "sampler_kwargs": sampler_kwargs,
    }


def scheduler_config(schedule, sampler):
    """(class name, config) of the diffusers scheduler of a flow model's
    `sampler` on `schedule`.

    Raises:
        ValueError: naming the sampler diffusers has no flow scheduler for.
    """
    class_name = _CLASS_OF_SAMPLER.get(type(sampler))
    if class_name is None:
        raise ValueError(
            "diffusers has no flow-matching scheduler for this sampler; export "
            "with one of "
            + ", ".join(s.__name__ for s in _CLASS_OF_SAMPLER)
            + f". Received: sampler={sampler!r}"
        )
    sampler.validate(schedule)  # refuses options without meaning on flow
    config = {
        "_class_name": class_name,
        "_diffusers_version": DIFFUSERS_VERSION,
        "num_train_timesteps": schedule.num_train_timesteps,
        **_FIXED[class_name],
    }
    if class_name == _DPM:
        config.update(
            use_flow_sigmas=True,
            flow_shift=schedule.shift,
            prediction_type="flow_prediction",
            lower_order_final=sampler.lower_order_final,
        )
    else:
        config["shift"] = schedule.shift
    own = schedule.get_config()
    config[PRIVATE_KEY] = {
        "num_steps": sampler.num_steps,
        **{k: own[k] for k in _TRAINING},
    }
    return class_name, config
