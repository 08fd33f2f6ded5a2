"""The `TrainConfig` settings of an EDM run (`schedule="edm"`), resolved and checked.

`EDM_SETTINGS` (from `keras_diffusion.schedules.edm_schedule`) are
`keras_diffusion.EDMSchedule`'s arguments, each a `TrainConfig` field and a
`scripts/train.py` flag; `None` takes the schedule's default, which `resolve`
fills in so that `config.json` records it.
"""

from keras_diffusion.schedules.edm_schedule import EDM_SETTINGS, EDMSchedule, edm_kwargs

# An EDM run's grid: Heun over 18 Karras sigmas (35 model calls), Karras et
# al.'s choice; DDPM and DDIM step on alphas_cumprod, which EDM has not.
EDM_SAMPLER = {"sampler": "heun", "sampling_steps": 18}


def resolve(config, values):
    """Fills and checks the EDM settings of `values`, the dict that
    `config.resolve()` builds from `config` (the settings as given)."""
    if values["schedule"] == "edm":
        _fix(config, values)
        return
    for name in EDM_SETTINGS:
        if values[name] is not None:
            raise ValueError(
                f"Argument `{name}` (--{name.replace('_', '-')}) applies "
                f"with schedule='edm'. Received: {name}={values[name]!r}, "
                f"schedule={values['schedule']!r}"
            )


def _fix(config, values):
    """The settings an EDM run fixes, in `values`; refuses the ones it
    has no use for."""
    for name in ("beta_start", "beta_end"):
        if getattr(config, name) is not None:
            raise ValueError(
                f"Argument `{name}` does not apply to schedule='edm', which "
                f"has no betas. Received: {name}={getattr(config, name)!r}"
            )
        values[name] = None
    if config.prediction_type not in (None, "epsilon"):
        raise ValueError(
            "Argument `prediction_type` does not apply to schedule='edm' (its "
            "c_skip and c_out fix what the network predicts). Received: "
            f"prediction_type={config.prediction_type!r}"
        )
    values["prediction_type"] = "epsilon"
    if config.sampler is None:
        values.update(EDM_SAMPLER)
        if config.sampling_steps is not None:
            values["sampling_steps"] = config.sampling_steps
    elif config.sampler in ("ddim", "ddpm"):
        raise ValueError(
            f"Argument `sampler` must be 'heun', 'euler' or 'dpm' with "
            f"schedule='edm'. Received: sampler={config.sampler!r}"
        )
    # Checks the values; config.json records all of them.
    values.update(EDMSchedule(**edm_kwargs(values)).get_config())
