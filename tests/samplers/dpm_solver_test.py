"""DPMSolverSampler: diffusers' pinned full-loop numbers, timesteps, order."""

import numpy as np
import tensorflow as tf

from keras_diffusion.samplers import DDIMSampler, DPMSolverSampler
from keras_diffusion.schedules.noise_schedule import NoiseSchedule

SIGMA_MIN = {"final_sigmas_type": "sigma_min", "lower_order_final": False}

# (sampler config, prediction type, mean |x|): diffusers'
# test_scheduler_dpm_multi.py config and full_loop, then the defaults (final
# sigma zero), as diffusers 0.42.1 computes them.
DIFFUSERS_FULL_LOOP = [
    (SIGMA_MIN, "epsilon", 0.3301),
    (SIGMA_MIN, "v_prediction", 0.2251),
    ({}, "epsilon", 0.240900),
    ({"use_karras_sigmas": True}, "epsilon", 0.294513),
]


def test_diffusers_full_loop(deter_sample, dummy_model):
    # DPM-Solver's init_noise_sigma is 1 and the model sees x_t itself, so
    # diffusers' start `dummy_sample_deter` is x_T unchanged.
    for config, prediction_type, mean in DIFFUSERS_FULL_LOOP:
        sampler = DPMSolverSampler(10, **config)
        x = sampler.sample(dummy_model, deter_sample, NoiseSchedule(), prediction_type)
        result = np.abs(x.numpy()).mean()
        assert abs(result - mean) < 1e-3, (config, prediction_type, result)


def test_timesteps_equal_diffusers():
    for spacing, offset, expected in [
        ("linspace", 0, [999, 856, 714, 571, 428, 285, 143]),
        ("leading", 1, [876, 751, 626, 501, 376, 251, 126]),
        ("trailing", 0, [999, 856, 713, 570, 428, 285, 142]),
    ]:
        sampler = DPMSolverSampler(7, timestep_spacing=spacing, steps_offset=offset)
        np.testing.assert_array_equal(sampler.timesteps(NoiseSchedule()), expected)


def test_karras_timesteps_start_at_the_top_and_decrease():
    t = DPMSolverSampler(10, use_karras_sigmas=True).timesteps(NoiseSchedule())
    assert t[0] == 999 and np.all(np.diff(t) < 0)


def test_first_order_steps_are_ddim_steps(deter_sample, dummy_model):
    # With two steps and a zero final sigma both steps are first order, and
    # first-order DPM-Solver++ is DDIM (Lu et al., 2022, section 4.1).
    schedule = NoiseSchedule()
    dpm = DPMSolverSampler(2, timestep_spacing="trailing")
    ddim = DDIMSampler(2, timestep_spacing="trailing")
    np.testing.assert_array_equal(dpm.timesteps(schedule), ddim.timesteps(schedule))
    a = dpm.sample(dummy_model, deter_sample, schedule).numpy()
    b = ddim.sample(dummy_model, deter_sample, schedule).numpy()
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_second_order_uses_the_previous_prediction(deter_sample):
    # A denoiser whose x0 differs from step to step: the 2M extrapolation
    # must differ from first order (lower_order_final keeps the last step
    # first order either way).
    def denoise(x, t):
        return x * tf.reshape(t, (-1, 1, 1, 1)) / 1000.0

    schedule = NoiseSchedule()
    second = DPMSolverSampler(3, timestep_spacing="trailing")
    first = DDIMSampler(3, timestep_spacing="trailing")
    a = second.sample(denoise, deter_sample, schedule).numpy()
    b = first.sample(denoise, deter_sample, schedule).numpy()
    assert np.abs(a - b).max() > 1e-3
