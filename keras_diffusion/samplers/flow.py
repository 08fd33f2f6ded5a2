"""The samplers on a `FlowMatchSchedule`: velocity outputs and option checks.

On a flow-matching schedule the sampler's state is x_s = (1 - s) x0 + s n,
the network gets x_s itself and diffusers' timestep s * T, and returns the
velocity v = n - x0; so x0 = x - s v and n = x + (1 - s) v. Euler and Heun
step over the schedule's shifted sigmas, as diffusers'
`FlowMatchEulerDiscreteScheduler` and `FlowMatchHeunDiscreteScheduler`;
DPM-Solver++ over the flow sigmas of `DPMSolverMultistepScheduler(
use_flow_sigmas=True, prediction_type="flow_prediction")`.
"""

import numpy as np

from keras_diffusion.samplers import options as options_module
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule

FLOW_SAMPLERS = ("EulerSampler", "HeunSampler", "DPMSolverSampler")


def is_flow(schedule):
    return isinstance(schedule, FlowMatchSchedule)


def check_sampler(sampler, options):
    """Raises unless `sampler` runs on a flow-matching schedule as set (see
    `samplers.options.check_sampler`)."""
    options_module.check_sampler(
        sampler, options, "FlowMatchSchedule", FLOW_SAMPLERS, "its shifted sigmas"
    )


def check_prediction_type(prediction_type):
    options_module.check_prediction_type(
        prediction_type,
        "a FlowMatchSchedule",
        "the network predicts the velocity noise - x0",
    )


def tables(schedule, plan):
    """The loop's conversion tables for a flow plan: `plan["sigma"]` is the
    level s the network is evaluated at, `plan["t"]` (optional) its timestep
    input, s * T by default."""
    s = np.asarray(plan["sigma"], np.float64)
    ones = np.ones_like(s)
    return {
        "t": np.asarray(plan.get("t", s * schedule.num_train_timesteps), np.float64),
        "in_scale": ones,
        "x0_x": ones,
        "x0_out": -s,
        "eps_x": ones,
        "eps_out": 1.0 - s,
        # The state x = (1 - s) x0 + s n.
        "a_state": 1.0 - s,
        "s_state": s,
    }


def dpm_sigmas(schedule, num_steps):
    """The `num_steps` flow sigmas of diffusers' `DPMSolverMultistepScheduler`
    with `use_flow_sigmas=True`: `shifted(1 - linspace(1, 1/T, n + 1))`,
    largest first, without its final 0 (so it starts below 1)."""
    T = schedule.num_train_timesteps
    ramp = 1.0 - np.linspace(1.0, 1.0 / T, int(num_steps) + 1)
    return np.flip(schedule.shifted(ramp))[:-1].copy()
