"""The `TrainConfig` settings of a flow-matching run (`schedule="flow"`),
resolved and checked.

`FLOW_SETTINGS` (from `keras_diffusion.schedules.flow_schedule`) are the
arguments of `keras_diffusion.FlowMatchSchedule` that a run sets, each a
`TrainConfig` field and a `scripts/train.py` flag; `None` takes the
schedule's default, which `resolve` fills in so that `config.json` records
it. `timesteps` is its `num_train_timesteps`.
"""

from keras_diffusion.schedules.flow_schedule import (
    FLOW_SETTINGS,
    FlowMatchSchedule,
    flow_kwargs,
)

# A flow run's grid: DPM-Solver++ 2M in 16 steps, the best sampler of flow
# models at 8 to 32 calls (docs/quality.md, "Objectives"); DDPM and DDIM step
# on alphas_cumprod, which flow matching has not.
FLOW_SAMPLER = {"sampler": "dpm", "sampling_steps": 16}


def resolve(config, values):
    """Fills and checks the flow settings of `values`, the dict that
    `config.resolve()` builds from `config` (the settings as given)."""
    if values["schedule"] == "flow":
        _fix(config, values)
        return
    for name in FLOW_SETTINGS:
        if values[name] is not None:
            raise ValueError(
                f"Argument `{name}` (--{name.replace('_', '-')}) applies "
                f"with schedule='flow'. Received: {name}={values[name]!r}, "
                f"schedule={values['schedule']!r}"
            )


def _fix(config, values):
    """The settings a flow run fixes, in `values`; refuses the ones it has
    no use for."""
    for name in ("beta_start", "beta_end"):
        if getattr(config, name) is not None:
            raise ValueError(
                f"Argument `{name}` (--{name.replace('_', '-')}) does not apply "
                "to schedule='flow', which has no betas. "
                f"Received: {name}={getattr(config, name)!r}"
            )
        values[name] = None
    if config.prediction_type not in (None, "epsilon"):
        raise ValueError(
            "Argument `prediction_type` (--prediction-type) does not apply to "
            "schedule='flow', whose network predicts the velocity noise - x0. "
            f"Received: prediction_type={config.prediction_type!r}"
        )
    values["prediction_type"] = "epsilon"
    if config.loss_weighting not in (None, "none"):
        raise ValueError(
            "Argument `loss_weighting` (--loss-weighting) does not apply to "
            "schedule='flow', whose loss is the unweighted velocity error. "
            f"Received: loss_weighting={config.loss_weighting!r}"
        )
    if config.sampler is None:
        values.update(FLOW_SAMPLER)
        if config.sampling_steps is not None:
            values["sampling_steps"] = config.sampling_steps
    elif config.sampler in ("ddim", "ddpm"):
        raise ValueError(
            "Argument `sampler` (--sampler) must be 'euler', 'heun' or 'dpm' "
            f"with schedule='flow'. Received: sampler={config.sampler!r}"
        )
    # Checks the values; config.json records all of them.
    schedule = FlowMatchSchedule(**flow_kwargs(values))
    values.update({name: getattr(schedule, name) for name in FLOW_SETTINGS})
