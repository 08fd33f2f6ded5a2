"""Property-based tests: random valid configurations keep the invariants of the
forward and reverse processes, and random invalid arguments only ever raise
`ValueError` or `TypeError`.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from keras_diffusion import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EDMSchedule,
    EulerSampler,
    HeunSampler,
    NoiseSchedule,
)
from keras_diffusion import data as kd_data
from keras_diffusion.samplers import PREDICTION_TYPES, TIMESTEP_SPACINGS
from keras_diffusion.schedules.noise_schedule import BETA_SCHEDULES

SAMPLERS = (DDPMSampler, DDIMSampler, DPMSolverSampler, EulerSampler, HeunSampler)
FUZZ = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# Each example of a sampler traces its loop anew (about half a second): fewer
# of them, still a few for each of the samplers and prediction types.
SAMPLER_FUZZ = settings(FUZZ, max_examples=12)


def denoise_fn(x, t):
    return 0.5 * x


@st.composite
def schedules(draw, max_timesteps=1000):
    """Valid `NoiseSchedule` kwargs over every named schedule."""
    beta_start = draw(st.floats(1e-5, 1e-2))
    beta_end = draw(st.floats(beta_start, 0.05))
    name = draw(st.sampled_from(BETA_SCHEDULES))
    if name == "sigmoid" and draw(st.booleans()):
        beta_start, beta_end = beta_end, beta_start  # Allowed for sigmoid.
    return {
        "num_train_timesteps": draw(st.integers(2, max_timesteps)),
        "beta_schedule": name,
        "beta_start": beta_start,
        "beta_end": beta_end,
        "rescale_zero_terminal_snr": draw(st.booleans()),
    }


@st.composite
def samplers(draw, num_train_timesteps):
    cls = draw(st.sampled_from(SAMPLERS))
    spacing = draw(st.sampled_from(TIMESTEP_SPACINGS))
    most = num_train_timesteps
    if cls is DPMSolverSampler and spacing != "trailing":
        most = max(1, most - 1)  # It spaces num_steps + 1 points.
    kwargs = {
        "num_steps": draw(st.integers(1, min(most, 30))),
        "timestep_spacing": spacing,
    }
    if cls is DDIMSampler:
        kwargs["eta"] = draw(st.floats(0.0, 1.0))
        kwargs["set_alpha_to_one"] = draw(st.booleans())
    if cls in (DDPMSampler, DDIMSampler):
        kwargs["clip_sample"] = draw(st.booleans())
    if cls in (DPMSolverSampler, EulerSampler, HeunSampler):
        kwargs["use_karras_sigmas"] = draw(st.booleans())
    if cls is HeunSampler:
        kwargs["clip_sample"] = draw(st.booleans())
    return cls(**kwargs)


@FUZZ
@given(schedules())
def test_alphas_cumprod_decreases_strictly_within_0_1(kwargs):
    schedule = NoiseSchedule(**kwargs)
    T = kwargs["num_train_timesteps"]
    for abar in (schedule.alphas_cumprod, schedule.alphas_cumprod_float64):
        assert abar.shape == (T,)
        assert np.all(np.isfinite(abar))
        assert abar[0] <= 1.0
        if kwargs["rescale_zero_terminal_snr"]:
            assert abar[-1] == 0.0
            abar = abar[:-1]
        assert np.all(abar > 0.0)
        assert np.all(np.diff(abar) < 0.0)
    assert schedule.betas.shape == (T,)
    assert np.all((schedule.betas > 0.0) & (schedule.betas <= 1.0))


@FUZZ
@given(schedules(), st.data())
def test_add_noise_of_zero_noise_is_the_scaled_signal(kwargs, data):
    schedule = NoiseSchedule(**kwargs)
    T = kwargs["num_train_timesteps"]
    t = np.array(data.draw(st.lists(st.integers(0, T - 1), min_size=1, max_size=4)))
    x0 = np.random.default_rng(len(t)).uniform(-1, 1, (len(t), 3, 2))
    x0 = x0.astype("float32")
    x_t = np.asarray(schedule.add_noise(x0, np.zeros_like(x0), t))
    expected = np.sqrt(schedule.alphas_cumprod_float64[t])[:, None, None] * x0
    np.testing.assert_allclose(x_t, expected, rtol=1e-5, atol=1e-7)
    # And v = -sqrt(1 - abar) x0 without noise.
    v = np.asarray(schedule.velocity(x0, np.zeros_like(x0), t))
    sigma = np.sqrt(1.0 - schedule.alphas_cumprod_float64[t])[:, None, None]
    np.testing.assert_allclose(v, -sigma * x0, rtol=1e-5, atol=1e-7)


@SAMPLER_FUZZ
@given(schedules(max_timesteps=200), st.sampled_from(PREDICTION_TYPES), st.data())
def test_every_sampler_gives_finite_output(kwargs, prediction_type, data):
    schedule = NoiseSchedule(**kwargs)
    sampler = data.draw(samplers(kwargs["num_train_timesteps"]))
    x_T = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    try:
        x0 = sampler.sample(denoise_fn, x_T, schedule, prediction_type, seed=1)
    except ValueError as error:
        # By design: x0 from an epsilon prediction is undefined where
        # alphas_cumprod is 0, which the sampler may visit.
        assert kwargs["rescale_zero_terminal_snr"], error
        assert prediction_type != "v_prediction", error
        assert "zero terminal SNR" in str(error)
        return
    x0 = np.asarray(x0)
    assert x0.shape == x_T.shape and x0.dtype == np.float32
    assert np.all(np.isfinite(x0)), (sampler, prediction_type, x0)


@SAMPLER_FUZZ
@given(
    schedules(max_timesteps=200),
    st.sampled_from(TIMESTEP_SPACINGS),
    st.sampled_from(("v_prediction", "sample")),
    st.data(),
)
def test_ddim_with_eta_0_is_deterministic(kwargs, spacing, prediction_type, data):
    schedule = NoiseSchedule(**kwargs)
    T = kwargs["num_train_timesteps"]
    sampler = DDIMSampler(
        num_steps=data.draw(st.integers(1, min(T, 30))), timestep_spacing=spacing
    )
    x_T = np.random.default_rng(1).standard_normal((2, 4)).astype("float32")
    first = sampler.sample(denoise_fn, x_T, schedule, prediction_type, seed=1)
    second = sampler.sample(denoise_fn, x_T, schedule, prediction_type, seed=2)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


# Invalid arguments: anything of any type, kept small so nothing is huge.
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=4),
    st.lists(st.integers(-3, 3), max_size=3),
    st.tuples(st.floats(-2, 2), st.floats(-2, 2)),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
    st.just(np.array([1.0, 2.0])),
)

SCHEDULE_ARGS = (
    "num_train_timesteps",
    "beta_schedule",
    "beta_start",
    "beta_end",
    "rescale_zero_terminal_snr",
    "trained_betas",
)
SAMPLER_ARGS = {
    DDPMSampler: ("num_steps", "timestep_spacing", "steps_offset", "clip_sample"),
    DDIMSampler: (
        "num_steps",
        "eta",
        "timestep_spacing",
        "steps_offset",
        "clip_sample",
        "clip_sample_range",
        "set_alpha_to_one",
    ),
    DPMSolverSampler: (
        "num_steps",
        "timestep_spacing",
        "steps_offset",
        "use_karras_sigmas",
        "final_sigmas_type",
        "lower_order_final",
    ),
    EulerSampler: (
        "num_steps",
        "timestep_spacing",
        "steps_offset",
        "use_karras_sigmas",
        "s_churn",
        "s_tmin",
        "s_tmax",
        "s_noise",
    ),
    HeunSampler: (
        "num_steps",
        "timestep_spacing",
        "steps_offset",
        "use_karras_sigmas",
        "clip_sample",
        "clip_sample_range",
    ),
}
EDM_ARGS = ("sigma_min", "sigma_max", "sigma_data", "rho", "p_mean", "p_std")


def _only_value_or_type_errors(call):
    try:
        return call()
    except (ValueError, TypeError) as error:
        assert str(error), "an error must say what is wrong"
        return None


@FUZZ
@given(st.sampled_from(SCHEDULE_ARGS), JUNK)
def test_junk_schedule_arguments_raise_value_or_type_errors(name, value):
    if name == "num_train_timesteps" and isinstance(value, int):
        assume(value < 5000)  # A valid but huge T only costs memory.
    schedule = _only_value_or_type_errors(
        lambda: NoiseSchedule(**{"num_train_timesteps": 4, name: value})
    )
    if schedule is not None:
        x0 = np.ones((1, 2), "float32")
        _only_value_or_type_errors(
            lambda: schedule.add_noise(x0, x0, np.array([schedule.num_train_timesteps]))
        )


@FUZZ
@given(st.sampled_from(EDM_ARGS), JUNK)
def test_junk_edm_schedule_arguments_raise_value_or_type_errors(name, value):
    schedule = _only_value_or_type_errors(lambda: EDMSchedule(**{name: value}))
    if schedule is not None:
        sigmas = schedule.sigmas(5)
        assert np.all(np.isfinite(sigmas)) and np.all(np.diff(sigmas) < 0)


@FUZZ
@given(st.sampled_from(SAMPLERS), st.data(), JUNK, JUNK)
def test_junk_sampler_arguments_raise_value_or_type_errors(cls, data, value, other):
    name = data.draw(st.sampled_from(SAMPLER_ARGS[cls]))
    sampler = _only_value_or_type_errors(lambda: cls(**{name: value}))
    if sampler is None:
        return
    schedule = NoiseSchedule(20, "cosine")
    x_T = np.zeros((1, 2), "float32")
    # The sampler, then one junk argument of `sample`.
    _only_value_or_type_errors(lambda: sampler.sample(denoise_fn, x_T, schedule))
    position = data.draw(
        st.sampled_from(("x_T", "schedule", "prediction_type", "seed"))
    )
    args = {"x_T": x_T, "schedule": schedule, "prediction_type": "v_prediction"}
    args[position] = other
    _only_value_or_type_errors(lambda: sampler.sample(denoise_fn, **args))


@FUZZ
@given(st.text(max_size=20))
def test_random_names_raise_value_errors(name):
    valid = (*BETA_SCHEDULES, *TIMESTEP_SPACINGS, *PREDICTION_TYPES, *kd_data.PRESETS)
    assume(name not in valid)
    x_T = np.zeros((1, 2), "float32")
    calls = (
        lambda: NoiseSchedule(10, name),
        lambda: DDIMSampler(timestep_spacing=name),
        lambda: DDIMSampler(2).sample(denoise_fn, x_T, NoiseSchedule(10), name),
        lambda: kd_data.get_preset(name),
    )
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert repr(name) in str(info.value)


@FUZZ
@given(
    st.sampled_from(
        ("batch_size", "image_size", "value_range", "seed", "shuffle", "flip", "labels")
    ),
    JUNK,
)
def test_junk_pipeline_arguments_raise_value_or_type_errors(name, value):
    if name == "image_size" and isinstance(value, int):
        assume(value < 64)
    images = np.arange(4 * 4 * 4, dtype="uint8").reshape(4, 4, 4)
    _only_value_or_type_errors(lambda: kd_data.from_arrays(images, **{name: value}))
