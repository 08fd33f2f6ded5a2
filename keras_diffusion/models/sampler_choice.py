"""Which sampler `generate` runs: the model's, the one named, or the best
measured for the process (`keras_diffusion.schedules.process.DEFAULT_SAMPLERS`)."""

from keras_diffusion import samplers
from keras_diffusion.utils.checks import check_choice


def default_sampler(schedule, prediction_type="v_prediction"):
    """The sampler `generate` uses when neither it nor the model is given one:
    the best measured for the process and prediction type, from the one table
    `keras_diffusion.schedules.process.DEFAULT_SAMPLERS`."""
    name, num_steps = schedule.default_sampler(prediction_type)
    return samplers.get(name, num_steps=num_steps)


def legacy_default_sampler(schedule):
    """What `default_sampler` was before a model saved its default sampler
    with it: the sampler of a `.keras` file that records none, so that it
    keeps generating the same images (DDIM-50 on a `NoiseSchedule`)."""
    name, num_steps = schedule.default_sampler(legacy=True)
    return samplers.get(name, num_steps=num_steps)


def resolve_sampler(sampler, default):
    """A `Sampler` from itself, its name or its config; `default` for `None`."""
    if sampler is None:
        return default
    if isinstance(sampler, str):
        check_choice("sampler", sampler, samplers.SAMPLERS)
    if isinstance(sampler, (str, dict)):
        return samplers.get(sampler)
    if not isinstance(sampler, samplers.Sampler):
        raise TypeError(
            "Argument `sampler` must be a keras_diffusion sampler, its name or "
            f"its config. Received: sampler={sampler!r}"
        )
    return sampler
