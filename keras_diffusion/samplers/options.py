"""Which sampler runs on which schedule: the refusals, with their reasons."""

import inspect


def changed_options(sampler, names):
    """The `(name, value)` pairs of `names` set to other than their default."""
    params = inspect.signature(type(sampler).__init__).parameters
    changed = []
    for name in names:
        value = getattr(sampler, name)
        if value != params[name].default:
            changed.append((name, value))
    return changed


def check_prediction_type(prediction_type, schedule_name, why):
    """Raises unless `prediction_type` is the default: on `schedule_name`
    the network's output is fixed, `why` says how."""
    if prediction_type != "epsilon":
        raise ValueError(
            f"Argument `prediction_type` does not apply to {schedule_name}: {why}. "
            f"Leave it at 'epsilon'. Received: prediction_type={prediction_type!r}"
        )


def check_sampler(sampler, options, schedule_name, runs_on, levels):
    """Raises unless `sampler` runs on a schedule of `schedule_name` as set.

    Args:
        sampler: the `Sampler`.
        options: the names of its options that have no meaning on that
            schedule, or `None` when the sampler does not run on it at all.
        schedule_name: str, the schedule's class name.
        runs_on: the names of the samplers that do run on it.
        levels: str, what its samplers step over ("its Karras sigmas").
    """
    name = type(sampler).__name__
    if options is None:
        raise ValueError(
            f"{name} does not run on a {schedule_name}: it steps on a "
            "NoiseSchedule's alphas_cumprod. Use one of "
            + ", ".join(runs_on)
            + f". Received: sampler={sampler!r}"
        )
    for option, value in changed_options(sampler, options):
        raise ValueError(
            f"Argument `{option}` of {name} has no meaning on a {schedule_name}, "
            f"whose samplers step over {levels}; leave it at its default. "
            f"Received: {option}={value!r}"
        )
