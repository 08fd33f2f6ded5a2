"""The samplers on an `EDMSchedule`: preconditioned outputs and option checks.

On an EDM schedule the sampler's state x is the unscaled x0 + sigma * n, the
network gets `c_in(sigma) * x` and `c_noise(sigma)` and returns its raw
output F, and the denoised estimate is `c_skip(sigma) * x + c_out(sigma) * F`
(Karras et al., 2022, Table 1), as in diffusers' `EDMEulerScheduler` and
`EDMDPMSolverMultistepScheduler`.
"""

import numpy as np

from keras_diffusion.samplers import options as options_module
from keras_diffusion.schedules.edm_schedule import EDMSchedule

EDM_SAMPLERS = ("EulerSampler", "HeunSampler", "DPMSolverSampler")


def is_edm(schedule):
    return isinstance(schedule, EDMSchedule)


def check_sampler(sampler, options):
    """Raises unless `sampler` runs on an EDM schedule as configured (see
    `samplers.options.check_sampler`)."""
    options_module.check_sampler(
        sampler, options, "EDMSchedule", EDM_SAMPLERS, "its Karras sigmas"
    )


def check_prediction_type(prediction_type):
    options_module.check_prediction_type(
        prediction_type,
        "an EDMSchedule",
        "the network output is preconditioned by c_skip and c_out",
    )


def tables(schedule, plan):
    """The loop's conversion tables for an EDM plan.

    `plan["sigma"]` is the noise level the network is evaluated at (its
    `c_in` and `c_noise`); `plan["sigma_out"]`, where given, the one its
    output is preconditioned at (diffusers' Euler with churn reads the output
    at the raised sigma_hat).
    """
    sigma = np.asarray(plan["sigma"], np.float64)
    sigma_out = np.asarray(plan.get("sigma_out", sigma), np.float64)
    c_skip = schedule.c_skip(sigma_out)
    c_out = schedule.c_out(sigma_out)
    return {
        "t": schedule.c_noise(sigma),
        "in_scale": schedule.c_in(sigma),
        # x0 = c_skip x + c_out F and eps = (x - x0) / sigma.
        "x0_x": c_skip,
        "x0_out": c_out,
        "eps_x": (1.0 - c_skip) / sigma_out,
        "eps_out": -c_out / sigma_out,
        # The state x = x0 + sigma n.
        "a_state": np.ones_like(sigma),
        "s_state": sigma,
    }
