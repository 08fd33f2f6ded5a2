"""Parity with diffusers' schedulers, run as diffusers' pipelines run them.

Skipped unless `diffusers` and `torch` are installed. Each case runs the same
start, the same deterministic model and, for the stochastic samplers, the same
noise (this sampler's per-step noise is handed to diffusers) through both.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    Sampler,
)
from keras_diffusion.schedules import diffusers_lists
from keras_diffusion.schedules.noise_schedule import NoiseSchedule
from keras_diffusion.schedules.vp_sampling import spaced_timesteps

diffusers = pytest.importorskip("diffusers")
torch = pytest.importorskip("torch")
scheduling_ddpm = pytest.importorskip("diffusers.schedulers.scheduling_ddpm")

SEED = 17
NUM_STEPS = 10

# HeunDiscreteScheduler's default betas are not DDPMScheduler's.
HEUN_BETAS = {"beta_start": 1e-4, "beta_end": 0.02}

# name: (our sampler from the spacing and the number of steps, diffusers
# class, its extra config, eta)
CASES = {
    "ddpm": (
        lambda s, n=NUM_STEPS: DDPMSampler(n, timestep_spacing=s),
        "DDPMScheduler",
        {"clip_sample": False},
        None,
    ),
    "ddpm_fixed_large_offset": (
        lambda s, n=NUM_STEPS: DDPMSampler(
            n, timestep_spacing=s, steps_offset=1, variance_type="fixed_large"
        ),
        "DDPMScheduler",
        {"clip_sample": False, "steps_offset": 1, "variance_type": "fixed_large"},
        None,
    ),
    "ddim": (
        lambda s, n=NUM_STEPS: DDIMSampler(n, timestep_spacing=s),
        "DDIMScheduler",
        {"clip_sample": False},
        0.0,
    ),
    "ddim_eta_clip": (
        lambda s, n=NUM_STEPS: DDIMSampler(
            n, eta=0.7, timestep_spacing=s, clip_sample=True
        ),
        "DDIMScheduler",
        {"clip_sample": True},
        0.7,
    ),
    "dpm": (
        lambda s, n=NUM_STEPS: DPMSolverSampler(n, timestep_spacing=s),
        "DPMSolverMultistepScheduler",
        {},
        None,
    ),
    "dpm_karras_sigma_min": (
        lambda s, n=NUM_STEPS: DPMSolverSampler(
            n,
            timestep_spacing=s,
            use_karras_sigmas=True,
            final_sigmas_type="sigma_min",
            lower_order_final=False,
        ),
        "DPMSolverMultistepScheduler",
        {
            "use_karras_sigmas": True,
            "final_sigmas_type": "sigma_min",
            "lower_order_final": False,
        },
        None,
    ),
    "euler": (
        lambda s, n=NUM_STEPS: EulerSampler(n, timestep_spacing=s),
        "EulerDiscreteScheduler",
        {},
        None,
    ),
    "euler_karras": (
        lambda s, n=NUM_STEPS: EulerSampler(
            n, timestep_spacing=s, use_karras_sigmas=True
        ),
        "EulerDiscreteScheduler",
        {"use_karras_sigmas": True},
        None,
    ),
    "heun": (
        lambda s, n=NUM_STEPS: HeunSampler(n, timestep_spacing=s),
        "HeunDiscreteScheduler",
        HEUN_BETAS,
        None,
    ),
    "heun_karras_clip": (
        lambda s, n=NUM_STEPS: HeunSampler(
            n, timestep_spacing=s, use_karras_sigmas=True, clip_sample=True
        ),
        "HeunDiscreteScheduler",
        {**HEUN_BETAS, "use_karras_sigmas": True, "clip_sample": True},
        None,
    ),
}

SCHEDULES = {
    "linear": ({}, {"beta_schedule": "linear"}),
    "cosine": ({"beta_schedule": "cosine"}, {"beta_schedule": "squaredcos_cap_v2"}),
    "zero_snr": (
        {"rescale_zero_terminal_snr": True},
        {"beta_schedule": "linear", "rescale_betas_zero_snr": True},
    ),
}


def _model(x, t):
    """A deterministic, nonlinear stand-in denoiser, in either framework."""
    if torch.is_tensor(x):
        t = t.float()
        return x * t / (t + 1) + 0.1 * torch.cos(3 * x)
    t = tf.reshape(t, (-1, 1, 1, 1))
    return x * t / (t + 1.0) + 0.1 * tf.cos(3.0 * x)


def _start():
    return np.random.default_rng(0).standard_normal((2, 4, 4, 3)).astype(np.float32)


def _our_noise(step, shape):
    seed = tf.constant([SEED, 0], tf.int32)
    noise = Sampler.step_noise(seed, step, shape).numpy()
    return torch.from_numpy(noise.transpose(0, 3, 1, 2).copy())


def _diffusers_loop(scheduler, eta, monkeypatch, num_steps=NUM_STEPS, last=None):
    """The loop of diffusers' pipelines, NHWC in and out; `last` stops it
    after that many steps."""
    drawn = []

    def randn_tensor(shape, **kwargs):
        drawn.append(None)
        return _our_noise(len(drawn) - 1, (shape[0], *shape[2:], shape[1]))

    monkeypatch.setattr(scheduling_ddpm, "randn_tensor", randn_tensor)
    scheduler.set_timesteps(num_steps)
    x = torch.from_numpy(_start().transpose(0, 3, 1, 2).copy())
    x = x * scheduler.init_noise_sigma
    for i, t in enumerate(scheduler.timesteps[:last]):
        out = _model(scheduler.scale_model_input(x, t), t)
        kwargs = {}
        if eta is not None:
            kwargs = {"eta": eta, "variance_noise": _our_noise(i, (2, 4, 4, 3))}
        x = scheduler.step(out, t, x, **kwargs).prev_sample
    return x.numpy().transpose(0, 2, 3, 1)


def _compare(
    name, spacing, prediction_type, schedule_name, monkeypatch, num_steps=NUM_STEPS
):
    """Returns the max abs difference from diffusers; checks the timesteps."""
    make, class_name, extra, eta = CASES[name]
    ours_kwargs, theirs_kwargs = SCHEDULES[schedule_name]
    scheduler = getattr(diffusers, class_name)(
        num_train_timesteps=1000,
        prediction_type=prediction_type,
        timestep_spacing=spacing,
        **theirs_kwargs,
        **extra,
    )
    schedule = NoiseSchedule(**ours_kwargs)
    if class_name == "HeunDiscreteScheduler":
        # diffusers' float32 alphas_cumprod keeps few digits of 1 - abar near
        # t = 0, and Heun's corrector divides by the sigma there (errors of
        # 1e-3 with "sample" prediction): both run on the float64 values.
        abar = schedule.alphas_cumprod_float64.copy()
        if schedule.rescale_zero_terminal_snr:
            abar[-1] = 2.0**-24
        scheduler.alphas_cumprod = torch.from_numpy(abar)
    expected = _diffusers_loop(scheduler, eta, monkeypatch, num_steps)
    sampler = make(spacing, num_steps)
    np.testing.assert_allclose(
        sampler.timesteps(schedule), scheduler.timesteps.numpy(), rtol=1e-4, atol=1e-4
    )
    x = sampler.sample(_model, _start(), schedule, prediction_type, seed=SEED)
    return float(np.abs(x.numpy() - expected).max())


# One test per sampler, looping over the sweep: the suite's per-test teardown
# costs more than a case. The cosine schedule's last sigma is ~1e4, in
# float32 in diffusers, hence the looser bound there. Not compared: Karras
# sigmas on the cosine schedule (diffusers' DPM truncates them to repeated
# integer timesteps and fails with an IndexError) and on zero terminal SNR
# (its sigmas are not monotone; diffusers' float32 sigma_to_t puts sigma_max
# at t = 995 instead of 999).
@pytest.mark.parametrize("name", sorted(CASES))
def test_same_result_as_diffusers(name, monkeypatch):
    diffs = {}
    for prediction_type in ("epsilon", "v_prediction", "sample"):
        for spacing in ("leading", "trailing", "linspace"):
            diffs[prediction_type, spacing] = _compare(
                name, spacing, prediction_type, "linear", monkeypatch
            )
    if name.startswith("heun"):
        # The stand-in model is no denoiser: as an x0 prediction, Heun's
        # corrector to sigma(0) = 0.01 takes the sample to |x| ~ 70 before
        # the last step returns to ~0.1, so float32 rounding there is ~1e-5.
        sample = {k: diffs.pop(k) for k in list(diffs) if k[0] == "sample"}
        assert max(sample.values()) < 3e-5, sample
    assert max(diffs.values()) < 1e-5, diffs
    for schedule_name, bound in (("cosine", 5e-4), ("zero_snr", 1e-5)):
        if "karras" in name and (schedule_name == "zero_snr" or name.startswith("dpm")):
            continue
        if name.startswith("heun"):
            # diffusers' Heun has no zero terminal SNR; on the cosine schedule
            # its first corrector, from sigma ~ 1e4 to ~ 5, cancels terms of
            # 1e4 in float32 in both implementations, which this model
            # amplifies to 0.3 on outputs of ~45.
            continue
        diff = _compare(name, "trailing", "v_prediction", schedule_name, monkeypatch)
        assert diff < bound, (schedule_name, diff)


@pytest.mark.parametrize(
    "sampler_class, class_name",
    [
        (DDPMSampler, "DDPMScheduler"),
        (DDIMSampler, "DDIMScheduler"),
        (DPMSolverSampler, "DPMSolverMultistepScheduler"),
        (EulerSampler, "EulerDiscreteScheduler"),
        (HeunSampler, "HeunDiscreteScheduler"),
    ],
)
def test_same_timesteps_as_diffusers(sampler_class, class_name):
    for spacing in ("leading", "trailing", "linspace"):
        for num_steps in (1, 7, 50, 999):
            for offset in (0, 1):
                scheduler = getattr(diffusers, class_name)(
                    timestep_spacing=spacing, steps_offset=offset
                )
                scheduler.set_timesteps(num_steps)
                sampler = sampler_class(
                    num_steps, timestep_spacing=spacing, steps_offset=offset
                )
                expected = scheduler.timesteps.numpy()
                if expected.max() > 999:  # diffusers leaves [0, T - 1]
                    with pytest.raises(ValueError, match="steps_offset=1"):
                        sampler.timesteps(NoiseSchedule())
                    continue
                np.testing.assert_array_equal(
                    sampler.timesteps(NoiseSchedule()),
                    expected,
                    err_msg=f"{spacing}, {num_steps}, {offset}",
                )


# Seven steps do not divide T = 1000. diffusers' DDIM steps from t to
# t - T // 7, which is off its own "trailing" and "linspace" lists; DDPM steps
# to the next listed timestep (`previous_timestep`), DPM-Solver, Euler and Heun
# to the next listed sigma. Each sampler gives diffusers' numbers there too.
@pytest.mark.parametrize(
    "name", ["ddim", "ddim_eta_clip", "ddpm", "dpm", "euler", "heun"]
)
def test_same_result_at_a_step_count_that_does_not_divide_t(name, monkeypatch):
    diffs = {
        spacing: _compare(name, spacing, "epsilon", "linear", monkeypatch, 7)
        for spacing in ("leading", "trailing", "linspace")
    }
    assert max(diffs.values()) < 1e-5, diffs


def test_ddim_leading_offset_past_the_stride_as_diffusers(monkeypatch):
    # steps_offset=145 >= 1000 // 7: diffusers' last step lands on timestep 3,
    # not on the clean sample, and so does DDIMSampler's.
    scheduler = diffusers.DDIMScheduler(clip_sample=False, steps_offset=145)
    expected = _diffusers_loop(scheduler, 0.0, monkeypatch, num_steps=7)
    sampler = DDIMSampler(7, steps_offset=145)
    x = sampler.sample(_model, _start(), NoiseSchedule())
    assert np.abs(x.numpy() - expected).max() < 1e-5


def test_ddim_trailing_list_ending_at_minus_one(monkeypatch):
    # 61 of 1,000 steps: diffusers lists 62 timesteps, the last -1, where it
    # reads alphas_cumprod[-1]. DDIMSampler takes its first 61 steps, and says so.
    monkeypatch.setattr(diffusers_lists, "_WARNED", set())
    scheduler = diffusers.DDIMScheduler(clip_sample=False, timestep_spacing="trailing")
    expected = _diffusers_loop(scheduler, 0.0, monkeypatch, num_steps=61, last=61)
    assert len(scheduler.timesteps) == 62 and scheduler.timesteps[-1] == -1
    sampler = DDIMSampler(61, timestep_spacing="trailing")
    with pytest.warns(UserWarning, match="62 timesteps, the last -1"):
        x = sampler.sample(_model, _start(), NoiseSchedule())
    assert np.abs(x.numpy() - expected).max() < 1e-5


@pytest.mark.parametrize(
    "class_name",
    [
        "DDPMScheduler",
        "DDIMScheduler",
        "DPMSolverMultistepScheduler",
        "EulerDiscreteScheduler",
        "HeunDiscreteScheduler",
    ],
)
def test_trailing_lists_differ_from_diffusers_where_the_warning_says(
    class_name, monkeypatch
):
    # Every count of T = 1000: `diffusers_trailing` is diffusers' list, and
    # the warning names a difference exactly where ours is another list.
    monkeypatch.setattr(diffusers_lists, "_WARNED", set())
    scheduler = getattr(diffusers, class_name)(timestep_spacing="trailing")
    longer, other = [], []
    for num_steps in range(1, 1001):
        scheduler.set_timesteps(num_steps)
        theirs = scheduler.timesteps.numpy()
        if class_name == "HeunDiscreteScheduler":  # each after the first twice
            theirs = np.concatenate([theirs[:1], theirs[1::2]])
        expected = diffusers_lists.diffusers_trailing(1000, num_steps)
        np.testing.assert_array_equal(theirs, expected, err_msg=str(num_steps))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = spaced_timesteps(1000, num_steps, "trailing")
        message = diffusers_lists.trailing_difference(1000, num_steps, ours)
        same = len(theirs) == len(ours) and np.array_equal(theirs, ours)
        assert (message is None) == same, num_steps
        if not same:
            (longer if len(theirs) > len(ours) else other).append(num_steps)
    assert (len(longer), len(other)) == (62, 49)
    assert longer[:3] == [61, 103, 121] and other[:3] == [48, 96, 112]
