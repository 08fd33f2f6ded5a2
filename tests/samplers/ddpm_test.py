"""DDPMSampler: respacing, the posterior step, its variance and clipping."""

import numpy as np
import tensorflow as tf

from keras_diffusion.samplers import DDPMSampler
from keras_diffusion.schedules.noise_schedule import NoiseSchedule


def test_default_visits_every_timestep():
    schedule = NoiseSchedule(num_train_timesteps=50)
    np.testing.assert_array_equal(
        DDPMSampler().timesteps(schedule), np.arange(50)[::-1]
    )
    assert DDPMSampler().get_config()["num_steps"] is None
    assert DDPMSampler().get_config()["variance_type"] == "fixed_small"


def test_respaced_timesteps():
    for spacing, expected in [
        ("leading", [900, 800, 700, 600, 500, 400, 300, 200, 100, 0]),
        ("trailing", [999, 899, 799, 699, 599, 499, 399, 299, 199, 99]),
    ]:
        sampler = DDPMSampler(10, timestep_spacing=spacing)
        np.testing.assert_array_equal(sampler.timesteps(NoiseSchedule()), expected)


def test_one_step_is_the_posterior_mean_plus_posterior_noise():
    # Respaced to [500, 0]: the first step goes from t = 500 to t_prev = 0
    # with beta = 1 - abar_500 / abar_0 (eq. (7) of Ho et al.).
    schedule = NoiseSchedule()
    abar = schedule.alphas_cumprod_float64
    a, a_prev = abar[500], abar[0]
    beta = 1 - a / a_prev
    x_T = np.full((1, 1, 1, 1), 0.8, np.float32)
    seen = []

    def denoise(x, t):
        seen.append(x)
        return tf.zeros_like(x)  # eps = 0, so x0 = x / sqrt(abar)

    DDPMSampler(2).sample(denoise, x_T, schedule, seed=11)
    x0 = 0.8 / np.sqrt(a)
    mean = (
        np.sqrt(a_prev) * beta / (1 - a) * x0
        + np.sqrt(1 - beta) * (1 - a_prev) / (1 - a) * 0.8
    )
    std = np.sqrt((1 - a_prev) / (1 - a) * beta)
    seed = tf.constant([11, 0], tf.int32)
    noise = DDPMSampler.step_noise(seed, 0, (1, 1, 1, 1)).numpy()
    np.testing.assert_allclose(seen[1].numpy(), mean + std * noise, rtol=1e-5)


def _first_step(variance_type):
    """x after the first of two steps (t = 500 -> 0) with eps = 0."""
    seen = []

    def denoise(x, t):
        seen.append(x)
        return tf.zeros_like(x)

    x_T = np.full((1, 1, 1, 1), 0.8, np.float32)
    sampler = DDPMSampler(2, variance_type=variance_type)
    sampler.sample(denoise, x_T, NoiseSchedule(), seed=11)
    return float(seen[1].numpy().ravel()[0])


def test_fixed_large_noise_is_the_steps_beta():
    # Ho et al., Sec. 3.2: sigma^2 = beta_t (here the respaced step's beta)
    # in place of the posterior variance; the mean is the same.
    abar = NoiseSchedule().alphas_cumprod_float64
    beta = 1 - abar[500] / abar[0]
    small = np.sqrt((1 - abar[0]) / (1 - abar[500]) * beta)
    noise = DDPMSampler.step_noise(tf.constant([11, 0], tf.int32), 0, (1, 1, 1, 1))
    noise = float(noise.numpy().ravel()[0])
    mean = _first_step("fixed_small") - small * noise
    np.testing.assert_allclose(
        _first_step("fixed_large"), mean + np.sqrt(beta) * noise, rtol=1e-5
    )
    # diffusers' "fixed_small_log" is the square root of the same variance.
    assert _first_step("fixed_small_log") == _first_step("fixed_small")


def test_clip_sample_bounds_the_result(deter_sample):
    def denoise(x, t):
        return -50.0 * tf.ones_like(x)  # x0 far outside [-1, 1]

    sampler = DDPMSampler(20, clip_sample=True, clip_sample_range=0.5)
    out = sampler.sample(denoise, deter_sample, NoiseSchedule(), seed=0).numpy()
    np.testing.assert_allclose(out, 0.5, atol=1e-6)
