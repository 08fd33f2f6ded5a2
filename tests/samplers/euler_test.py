"""EulerSampler: as diffusers' pipelines run EulerDiscreteScheduler.

Known answers here; tests/samplers/diffusers_parity_test.py runs the same
loops through diffusers itself.
"""

import numpy as np
import pytest

from keras_diffusion.samplers import EulerSampler
from keras_diffusion.schedules.noise_schedule import NoiseSchedule

DATA_STD = 0.5  # the data: x0 ~ N(0, DATA_STD**2), elementwise


def _sigmas(schedule, num_steps, spacing):
    """diffusers' Euler sigmas, from their definition: sigma = sqrt((1 - abar)
    / abar), interpolated at the spaced (fractional for "linspace")
    timesteps, then 0."""
    T = schedule.num_train_timesteps
    abar = schedule.alphas_cumprod_float64
    if spacing == "linspace":
        t = np.linspace(0, T - 1, num_steps)[::-1]
    else:
        t = (np.arange(num_steps) * (T // num_steps))[::-1]
    sigmas = np.interp(t, np.arange(T), np.sqrt((1 - abar) / abar))
    return np.append(sigmas, 0.0)


@pytest.mark.parametrize(
    "spacing, prediction_type",
    [
        ("linspace", "epsilon"),
        ("linspace", "v_prediction"),
        ("linspace", "sample"),
        ("leading", "epsilon"),
    ],
)
def test_each_step_is_an_euler_step_of_the_gaussian_ode(
    gaussian_oracle, spacing, prediction_type
):
    # For N(0, s**2) data the ideal denoiser is D(x, sigma) = s**2 x / (s**2 +
    # sigma**2), so an Euler step x + (x - D) / sigma (sigma' - sigma)
    # multiplies x by 1 + sigma (sigma' - sigma) / (s**2 + sigma**2): the
    # sampler's output is the start times the product of those factors.
    schedule = NoiseSchedule()
    num_steps = 7  # "linspace" timesteps 999, 832.5, 666, ...: fractional
    sigmas = _sigmas(schedule, num_steps, spacing)
    sampler = EulerSampler(num_steps, timestep_spacing=spacing)
    z = np.random.default_rng(0).standard_normal((2, 4, 4, 1)).astype(np.float32)
    denoise = gaussian_oracle(schedule, DATA_STD, prediction_type)
    x = sampler.sample(denoise, z, schedule, prediction_type).numpy()
    # init_noise_sigma: sigma_max, or sqrt(sigma_max**2 + 1) for "leading".
    start = sigmas[0] if spacing == "linspace" else np.sqrt(sigmas[0] ** 2 + 1)
    factors = 1 + sigmas[:-1] * np.diff(sigmas) / (DATA_STD**2 + sigmas[:-1] ** 2)
    np.testing.assert_allclose(x, z * start * np.prod(factors), rtol=1e-4, atol=1e-6)


def test_more_steps_converge_at_first_order_to_the_ode_solution(gaussian_oracle):
    # The ODE's solution: x(sigma) = x(sigma_max) sqrt(s**2 + sigma**2) /
    # sqrt(s**2 + sigma_max**2). The last step, from sigma_min to 0, returns
    # D(x, sigma_min): the reference is that of the exact x(sigma_min).
    schedule = NoiseSchedule()
    s = DATA_STD
    z = np.random.default_rng(1).standard_normal((2, 4, 4, 1)).astype(np.float32)
    denoise = gaussian_oracle(schedule, s)
    steps = np.array([10, 20, 40])
    errors = []
    for n in steps:
        sigmas = _sigmas(schedule, n, "linspace")
        s_max, s_min = sigmas[0], sigmas[-2]
        x_min = z * s_max * np.sqrt(s**2 + s_min**2) / np.sqrt(s**2 + s_max**2)
        reference = s**2 / (s**2 + s_min**2) * x_min
        x = EulerSampler(n).sample(denoise, z, schedule).numpy()
        errors.append(np.abs(x - reference).max())
    order = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 0.85 < order < 1.15, (errors, order)


def test_model_sees_the_variance_preserving_input():
    schedule = NoiseSchedule()
    abar = schedule.alphas_cumprod_float64
    for spacing in ("linspace", "leading"):
        sampler = EulerSampler(4, timestep_spacing=spacing)
        t0 = int(sampler.timesteps(schedule)[0])
        sigma = np.sqrt((1 - abar[t0]) / abar[t0])
        # init_noise_sigma: sigma_max, or sqrt(sigma_max**2 + 1) for "leading".
        init = sigma if spacing == "linspace" else np.sqrt(sigma**2 + 1)
        seen = []

        def denoise(x, t, seen=seen):
            seen.append((x.numpy(), t.numpy()))
            return 0.0 * x

        sampler.sample(denoise, np.ones((2, 1, 1, 1), np.float32), schedule)
        expected = init / np.sqrt(sigma**2 + 1)
        np.testing.assert_allclose(seen[0][0], expected, rtol=1e-6, err_msg=spacing)
        np.testing.assert_array_equal(seen[0][1], [t0, t0])


def test_linspace_timesteps_are_fractional():
    t = EulerSampler(7).timesteps(NoiseSchedule())
    np.testing.assert_array_equal(t, [999, 832.5, 666, 499.5, 333, 166.5, 0])
    assert t.dtype == np.float32
