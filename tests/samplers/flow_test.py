"""The samplers on a FlowMatchSchedule: diffusers parity, the Gaussian closed
form and its convergence orders, refused samplers and options."""

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import FlowMatchSchedule
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    RePaintSampler,
)


def _network(x, t):
    """A deterministic, nonlinear stand-in for the velocity network."""
    if type(x).__module__.startswith("torch"):
        return 0.3 * x + 0.1 * (3 * x + t.float().reshape(-1, 1, 1, 1) / 1000).cos()
    t = tf.reshape(t, (-1, 1, 1, 1))
    return 0.3 * x + 0.1 * tf.cos(3.0 * x + t / 1000.0)


def _start():
    return np.random.default_rng(0).standard_normal((2, 4, 4, 3)).astype(np.float32)


def _diffusers_loop(scheduler, num_steps):
    """diffusers' pipeline loop (as SD3's), NHWC in and out; the timesteps
    the network got."""
    import torch

    scheduler.set_timesteps(num_steps)
    x = torch.from_numpy(_start().transpose(0, 3, 1, 2).copy())
    seen = []
    for t in scheduler.timesteps:
        seen.append(float(t))
        out = _network(x, t.expand(x.shape[0]))
        x = scheduler.step(out, t, x).prev_sample
    return x.numpy().transpose(0, 2, 3, 1), np.array(seen)


def _ours(sampler, schedule):
    x = sampler.sample(_network, _start(), schedule).numpy()
    return x, sampler.timesteps(schedule)


def _scheduler(kind, shift):
    import diffusers

    if kind == "euler":
        return diffusers.FlowMatchEulerDiscreteScheduler(shift=shift)
    if kind == "heun":
        return diffusers.FlowMatchHeunDiscreteScheduler(shift=shift)
    return diffusers.DPMSolverMultistepScheduler(
        use_flow_sigmas=True,
        flow_shift=shift,
        prediction_type="flow_prediction",
        solver_order=2,
        algorithm_type="dpmsolver++",
    )


SAMPLERS = {"euler": EulerSampler, "heun": HeunSampler, "dpm": DPMSolverSampler}


@pytest.mark.parametrize("kind", ["euler", "heun", "dpm"])
def test_matches_diffusers_flow_schedulers(kind):
    pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    errors = {}
    for shift in (1.0, 3.0):
        schedule = FlowMatchSchedule(shift=shift)
        for num_steps in (1, 2, 4, 8, 28):
            expected, their_t = _diffusers_loop(_scheduler(kind, shift), num_steps)
            got, our_t = _ours(SAMPLERS[kind](num_steps), schedule)
            np.testing.assert_allclose(our_t, their_t, rtol=1e-6, atol=1e-4)
            errors[shift, num_steps] = float(np.abs(got - expected).max())
    # diffusers' Heun corrector recomputes the velocity as (x - (x - s v)) / s
    # at s = 0.001 (two steps): float32 cancellation of 2.4e-5 there, which
    # ours avoids (the next test holds it to the float64 answer).
    assert max(errors.values()) < (5e-5 if kind == "heun" else 1e-5), errors


def test_heun_equals_the_float64_heun_steps():
    schedule = FlowMatchSchedule(shift=3.0)
    for num_steps in (2, 8):
        levels = np.append(schedule.sigmas(num_steps), 0.0)
        x = _start().astype(np.float64)

        def v(x, s):
            return 0.3 * x + 0.1 * np.cos(3.0 * x + s)

        for s, s_next in zip(levels[:-1], levels[1:], strict=True):
            x_euler = x + (s_next - s) * v(x, s)
            if s_next > 0:
                x = x + (s_next - s) * (v(x, s) + v(x_euler, s_next)) / 2
            else:
                x = x_euler
        got = _ours(HeunSampler(num_steps), schedule)[0]
        np.testing.assert_allclose(got, x, atol=1e-6)


def test_sigmas_are_sd3_shifted_levels():
    # SD3: sigma = shift * s / (1 + (shift - 1) * s) of the linear levels
    # from 1 to the shifted 1 / T (diffusers' `set_timesteps`).
    T, shift, n = 1000, 3.0, 5
    schedule = FlowMatchSchedule(shift=shift)
    sigma_min = shift * (1 / T) / (1 + (shift - 1) / T)
    linear = np.linspace(1.0, sigma_min, n)
    expected = shift * linear / (1 + (shift - 1) * linear)
    np.testing.assert_allclose(schedule.sigmas(n), expected, rtol=1e-6)
    assert schedule.sigmas(n)[0] == 1.0
    np.testing.assert_allclose(FlowMatchSchedule().sigmas(3), [1.0, 0.5005, 0.001])


def _gaussian_velocity(scale):
    """The ideal velocity of data N(0, scale**2): E[n - x0 | x_s] is linear in
    x_s, with x_s ~ N(0, ((1 - s) scale)**2 + s**2)."""

    def velocity(x, t):
        s = tf.reshape(t / 1000.0, (-1, 1, 1, 1))
        var = ((1 - s) * scale) ** 2 + s**2
        return x * (s - (1 - s) * scale**2) / var

    return velocity


def test_euler_and_heun_converge_at_their_orders_on_gaussian_data():
    # The flow ODE of N(0, c**2) data carries x_1 = n to x_0 = c * n, exactly:
    # x_s = sqrt(((1 - s) c)**2 + s**2) n. Euler's error falls linearly with
    # the step, Heun's quadratically.
    scale = 0.5
    schedule = FlowMatchSchedule()
    x_T = _start()

    def error(sampler):
        x = sampler.sample(_gaussian_velocity(scale), x_T, schedule).numpy()
        return float(np.abs(x - scale * x_T).max())

    for sampler_class, order in ((EulerSampler, 1.0), (HeunSampler, 2.0)):
        errors = [error(sampler_class(n)) for n in (8, 16, 32)]
        rates = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
        assert np.all(np.abs(rates - order) < 0.25), (sampler_class, errors, rates)


@pytest.mark.parametrize("sampler", [DDIMSampler(), DDPMSampler(), RePaintSampler()])
def test_samplers_on_alphas_cumprod_are_refused(sampler):
    # Each says it needs a VP schedule, before any step.
    with pytest.raises(
        ValueError,
        match=f"\\('{sampler.name}'\\) does not run on the 'flow' process "
        "\\(FlowMatchSchedule\\): it needs 'vp' \\(NoiseSchedule\\); "
        "the samplers that do: dpm\\|euler\\|heun",
    ):
        sampler.sample(_network, _start(), FlowMatchSchedule())


@pytest.mark.parametrize(
    "sampler, option",
    [
        (EulerSampler(8, use_karras_sigmas=True), "use_karras_sigmas"),
        (EulerSampler(8, s_churn=1.0), "s_churn"),
        (HeunSampler(8, timestep_spacing="trailing"), "timestep_spacing"),
        (DPMSolverSampler(8, final_sigmas_type="sigma_min"), "final_sigmas_type"),
    ],
)
def test_options_without_meaning_are_refused(sampler, option):
    with pytest.raises(ValueError, match=f"`{option}`.*FlowMatchSchedule"):
        sampler.timesteps(FlowMatchSchedule())


def test_prediction_type_is_refused():
    with pytest.raises(ValueError, match="prediction_type.*velocity"):
        EulerSampler(4).sample(
            _network, _start(), FlowMatchSchedule(), prediction_type="v_prediction"
        )
