"""DDIMSampler: diffusers' pinned full-loop numbers and the timestep rule."""

import numpy as np

from keras_diffusion.samplers import DDIMSampler
from keras_diffusion.schedules.noise_schedule import NoiseSchedule

# diffusers' test_scheduler_ddim.py, full_loop with clip_sample=True:
# (sampler config, schedule config, prediction type, sum |x|, mean |x|).
DIFFUSERS_FULL_LOOP = [
    ({}, {}, "epsilon", 172.0067, 0.223967),
    ({}, {}, "v_prediction", 52.5302, 0.0684),
    ({"set_alpha_to_one": True}, {"beta_start": 0.01}, "epsilon", 149.8295, 0.1951),
    ({"set_alpha_to_one": False}, {"beta_start": 0.01}, "epsilon", 149.0784, 0.1941),
]


def test_diffusers_full_loop(deter_sample, dummy_model):
    # diffusers feeds `dummy_sample_deter` as the start; DDIM's
    # init_noise_sigma is 1, so it goes in as x_T unchanged.
    for config, schedule_kwargs, prediction_type, total, mean in DIFFUSERS_FULL_LOOP:
        sampler = DDIMSampler(10, clip_sample=True, **config)
        schedule = NoiseSchedule(**schedule_kwargs)
        x = sampler.sample(dummy_model, deter_sample, schedule, prediction_type)
        x = np.abs(x.numpy())
        assert abs(x.sum() - total) < 1e-2, (config, prediction_type, x.sum())
        assert abs(x.mean() - mean) < 1e-3, (config, prediction_type, x.mean())


def test_timesteps_equal_diffusers():
    for num_steps, spacing, offset, expected in [
        (5, "leading", 1, [801, 601, 401, 201, 1]),  # diffusers' test_steps_offset
        (7, "trailing", 0, [999, 856, 713, 570, 428, 285, 142]),
        (7, "linspace", 0, [999, 832, 666, 500, 333, 166, 0]),
    ]:
        sampler = DDIMSampler(num_steps, timestep_spacing=spacing, steps_offset=offset)
        np.testing.assert_array_equal(sampler.timesteps(NoiseSchedule()), expected)


def _numpy_ddim(model, x, abar, timesteps):
    """Eq. (12) with eta = 0 in float64, stepping to the next listed timestep."""
    x = x.astype(np.float64)
    for i, t in enumerate(timesteps):
        a = abar[t]
        a_prev = abar[timesteps[i + 1]] if i + 1 < len(timesteps) else 1.0
        eps = model(x, t)
        x0 = (x - np.sqrt(1 - a) * eps) / np.sqrt(a)
        x = np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps
    return x


def test_steps_to_the_next_listed_timestep(deter_sample, dummy_model):
    # Here diffusers would step to t - T // n, off its own list.
    schedule = NoiseSchedule()
    for num_steps, spacing in [(10, "linspace"), (7, "trailing")]:
        sampler = DDIMSampler(num_steps, timestep_spacing=spacing)
        expected = _numpy_ddim(
            lambda x, t: x * t / (t + 1.0),
            deter_sample,
            schedule.alphas_cumprod_float64,
            sampler.timesteps(schedule),
        )
        x = sampler.sample(dummy_model, deter_sample, schedule).numpy()
        np.testing.assert_allclose(x, expected, atol=2e-5, err_msg=spacing)
