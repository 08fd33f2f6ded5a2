"""The samplers on an EDMSchedule: diffusers parity, known answers, bad options."""

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import EDMSchedule
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    Sampler,
)

SEED = 17
SIGMA_DATA = 0.5


def _network(x, c_noise):
    """A deterministic, nonlinear stand-in for the raw network F."""
    if type(x).__module__.startswith("torch"):
        return 0.3 * x + 0.1 * (3 * x + c_noise.float()).cos()
    c_noise = tf.reshape(c_noise, (-1, 1, 1, 1))
    return 0.3 * x + 0.1 * tf.cos(3.0 * x + c_noise)


def _start():
    return np.random.default_rng(0).standard_normal((2, 4, 4, 3)).astype(np.float32)


def _diffusers_loop(scheduler, num_steps, step_kwargs=None, noise=None):
    """diffusers' pipeline loop on an EDM scheduler, NHWC in and out."""
    import torch

    scheduler.set_timesteps(num_steps)
    x = torch.from_numpy(_start().transpose(0, 3, 1, 2).copy())
    x = x * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        out = _network(scheduler.scale_model_input(x, t), t)
        x = scheduler.step(out, t, x, **(step_kwargs or {})).prev_sample
    return x.numpy().transpose(0, 2, 3, 1)


def _our_noise(step, nchw_shape):
    import torch

    shape = (nchw_shape[0], *nchw_shape[2:], nchw_shape[1])
    noise = Sampler.step_noise(tf.constant([SEED, 0], tf.int32), step, shape)
    return torch.from_numpy(noise.numpy().transpose(0, 3, 1, 2).copy())


def _edm_euler_cases():
    return [
        ({}, {}),
        # Churn on every step, and only on the steps with sigma in [0.05, 10].
        ({"s_churn": 4.0}, {"s_churn": 4.0}),
        (
            {"s_churn": 40.0, "s_tmin": 0.05, "s_tmax": 10.0, "s_noise": 1.003},
            {"s_churn": 40.0, "s_tmin": 0.05, "s_tmax": 10.0, "s_noise": 1.003},
        ),
    ]


def test_euler_matches_diffusers_edm_euler(monkeypatch):
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    from diffusers.schedulers import scheduling_edm_euler

    schedule = EDMSchedule(sigma_data=SIGMA_DATA)
    diffs = {}
    for ours, theirs in _edm_euler_cases():
        for num_steps in (1, 10):
            scheduler = diffusers.EDMEulerScheduler(sigma_data=SIGMA_DATA)

            def randn_tensor(shape, scheduler=scheduler, **kwargs):
                return _our_noise(scheduler.step_index, shape)

            monkeypatch.setattr(scheduling_edm_euler, "randn_tensor", randn_tensor)
            expected = _diffusers_loop(scheduler, num_steps, theirs)
            sampler = EulerSampler(num_steps, **ours)
            np.testing.assert_allclose(
                sampler.timesteps(schedule), scheduler.timesteps.numpy(), atol=1e-6
            )
            x = sampler.sample(_network, _start(), schedule, seed=SEED).numpy()
            diffs[str(ours), num_steps] = float(np.abs(x - expected).max())
    # One step ends in diffusers' x + (x - x0) / sigma * (0 - sigma) from
    # |x| ~ 250: float32 cancellation of ~2e-5 there (ours is x0 itself).
    one_step = {k: diffs.pop(k) for k in list(diffs) if k[1] == 1}
    assert max(one_step.values()) < 5e-5, one_step
    assert max(diffs.values()) < 1e-5, diffs
    # The churn is there: it moves the result.
    plain = EulerSampler(10).sample(_network, _start(), schedule).numpy()
    churned = EulerSampler(10, s_churn=4.0).sample(
        _network, _start(), schedule, seed=SEED
    )
    assert np.abs(churned.numpy() - plain).max() > 1e-2


def test_dpm_solver_matches_diffusers_edm_dpm_solver():
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    schedule = EDMSchedule(sigma_min=0.01, sigma_max=50.0, sigma_data=SIGMA_DATA)
    diffs = {}
    for final_sigmas_type in ("zero", "sigma_min"):
        for lower_order_final in (True, False):
            for num_steps in (1, 10, 16):
                options = {
                    "final_sigmas_type": final_sigmas_type,
                    "lower_order_final": lower_order_final,
                }
                scheduler = diffusers.EDMDPMSolverMultistepScheduler(
                    sigma_min=0.01,
                    sigma_max=50.0,
                    sigma_data=SIGMA_DATA,
                    solver_order=2,
                    algorithm_type="dpmsolver++",
                    **options,
                )
                expected = _diffusers_loop(scheduler, num_steps)
                sampler = DPMSolverSampler(num_steps, **options)
                x = sampler.sample(_network, _start(), schedule).numpy()
                key = (final_sigmas_type, lower_order_final, num_steps)
                diffs[key] = float(np.abs(x - expected).max())
    assert max(diffs.values()) < 1e-5, diffs


def _gaussian_network(schedule, data_std):
    """The raw network whose preconditioned output is the ideal denoiser of
    N(0, data_std**2) data: D(x, sigma) = data_std**2 / (data_std**2 +
    sigma**2) x."""
    sd = schedule.sigma_data

    def network(x_in, c_noise):
        sigma = tf.reshape(tf.exp(4.0 * c_noise), (-1, 1, 1, 1))
        x = x_in * tf.sqrt(sigma**2 + sd**2)
        denoised = data_std**2 / (data_std**2 + sigma**2) * x
        c_skip = sd**2 / (sigma**2 + sd**2)
        c_out = sigma * sd / tf.sqrt(sigma**2 + sd**2)
        return (denoised - c_skip * x) / c_out

    return network


def test_heun_is_second_order_and_euler_first_on_the_gaussian_ode():
    # For N(0, s**2) data the ODE dx/dsigma = (x - D) / sigma has the solution
    # x(sigma) = x(sigma_max) sqrt(s**2 + sigma**2) / sqrt(s**2 + sigma_max**2).
    # Both samplers end with an Euler step from sigma_min to 0, which returns
    # D(x, sigma_min): the reference is that of the exact x(sigma_min).
    schedule = EDMSchedule(sigma_data=0.5)
    data_std = 0.8
    network = _gaussian_network(schedule, data_std)
    z = _start()
    s, s_min, s_max = data_std, schedule.sigma_min, schedule.sigma_max
    x_start = z.astype(np.float64) * schedule.init_sigma
    x_min = x_start * np.sqrt(s**2 + s_min**2) / np.sqrt(s**2 + s_max**2)
    reference = s**2 / (s**2 + s_min**2) * x_min
    steps = np.array([16, 32, 64])
    orders = {}
    for sampler_class in (HeunSampler, EulerSampler):
        errors = [
            np.abs(
                sampler_class(n).sample(network, z, schedule).numpy() - reference
            ).max()
            for n in steps
        ]
        slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
        orders[sampler_class.__name__] = -slope
    # Measured: Heun 2.15, Euler 0.98.
    assert 1.8 < orders["HeunSampler"] < 2.5, orders
    assert 0.85 < orders["EulerSampler"] < 1.15, orders


def test_heun_on_edm_is_karras_algorithm_1():
    # Algorithm 1 written out in NumPy, on the same network.
    schedule = EDMSchedule(sigma_data=SIGMA_DATA)
    num_steps = 5
    sampler = HeunSampler(num_steps)
    assert len(sampler.timesteps(schedule)) == 2 * num_steps - 1
    sigmas = np.append(schedule.sigmas(num_steps), 0.0)

    def denoise(x, sigma):
        c_noise = tf.fill([x.shape[0]], np.float32(schedule.c_noise(sigma)))
        out = _network(tf.constant(x * schedule.c_in(sigma), tf.float32), c_noise)
        return schedule.c_skip(sigma) * x + schedule.c_out(sigma) * out.numpy()

    x = _start().astype(np.float64) * np.sqrt(schedule.sigma_max**2 + 1)
    for s, s_next in zip(sigmas[:-1], sigmas[1:], strict=True):
        d = (x - denoise(x, s)) / s
        x_next = x + (s_next - s) * d
        if s_next > 0:
            d_next = (x_next - denoise(x_next, s_next)) / s_next
            x_next = x + (s_next - s) * (d + d_next) / 2
        x = x_next
    ours = sampler.sample(_network, _start(), schedule).numpy()
    np.testing.assert_allclose(ours, x, atol=2e-5)


def test_sampler_options_without_meaning_on_edm_are_refused():
    schedule = EDMSchedule()
    x_T = _start()
    cases = [
        (DDIMSampler(10, set_alpha_to_one=False), "set_alpha_to_one=False"),
        (DDIMSampler(10), "DDIMSampler"),
        (DDPMSampler(10), "DDPMSampler"),
        (EulerSampler(10, use_karras_sigmas=True), "use_karras_sigmas"),
        (EulerSampler(10, timestep_spacing="trailing"), "timestep_spacing"),
        (HeunSampler(10, clip_sample=True), "clip_sample"),
        (DPMSolverSampler(10, steps_offset=1), "steps_offset"),
    ]
    for sampler, name in cases:
        with pytest.raises(ValueError, match=name):
            sampler.sample(_network, x_T, schedule)
    with pytest.raises(ValueError, match="prediction_type"):
        HeunSampler(4).sample(_network, x_T, schedule, "v_prediction")


def test_churn_on_a_noise_schedule_is_refused():
    from keras_diffusion import NoiseSchedule

    with pytest.raises(ValueError, match="s_churn"):
        EulerSampler(10, s_churn=1.0).sample(_network, _start(), NoiseSchedule())
    with pytest.raises(ValueError, match="s_tmax"):
        EulerSampler(10, s_tmin=2.0, s_tmax=1.0)


def test_edm_samplers_round_trip_their_config():
    import keras

    for sampler in (
        EulerSampler(7, s_churn=2.0, s_tmax=5.0),
        HeunSampler(9),
        DPMSolverSampler(5, final_sigmas_type="sigma_min"),
    ):
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(sampler)
        )
        assert type(restored) is type(sampler)
        assert restored.get_config() == sampler.get_config()
