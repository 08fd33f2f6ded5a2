"""DDIMSampler: diffusers' pinned full-loop numbers and the timestep rules."""

import keras
import numpy as np
import pytest

from keras_diffusion.samplers import DDIMSampler
from keras_diffusion.schedules import diffusers_lists
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


def _numpy_ddim(model, x, abar, timesteps, previous):
    """Eq. (12) with eta = 0 in float64, stepping from t to `previous(i, t)`."""
    x = x.astype(np.float64)
    for i, t in enumerate(timesteps):
        a = abar[t]
        t_prev = previous(i, t)
        a_prev = abar[t_prev] if t_prev >= 0 else 1.0
        eps = model(x, t)
        x0 = (x - np.sqrt(1 - a) * eps) / np.sqrt(a)
        x = np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps
    return x


def _next_listed(timesteps):
    return lambda i, t: timesteps[i + 1] if i + 1 < len(timesteps) else -1


# (num_steps, spacing, steps_offset): where diffusers' t - T // n is not the
# next timestep of the list.
OFF_THE_LIST = [(10, "linspace", 0), (7, "trailing", 0), (7, "leading", 145)]


def test_steps_to_t_minus_t_over_n_by_default(deter_sample, dummy_model):
    schedule = NoiseSchedule()
    for num_steps, spacing, offset in OFF_THE_LIST:
        sampler = DDIMSampler(num_steps, timestep_spacing=spacing, steps_offset=offset)
        expected = _numpy_ddim(
            lambda x, t: x * t / (t + 1.0),
            deter_sample,
            schedule.alphas_cumprod_float64,
            sampler.timesteps(schedule),
            lambda i, t, n=num_steps: t - 1000 // n,
        )
        x = sampler.sample(dummy_model, deter_sample, schedule).numpy()
        np.testing.assert_allclose(x, expected, atol=2e-5, err_msg=spacing)


def test_next_listed_steps_to_the_next_timestep_of_the_list(deter_sample, dummy_model):
    schedule = NoiseSchedule()
    for num_steps, spacing, offset in OFF_THE_LIST:
        sampler = DDIMSampler(
            num_steps,
            timestep_spacing=spacing,
            steps_offset=offset,
            previous_timestep="next_listed",
        )
        timesteps = sampler.timesteps(schedule)
        expected = _numpy_ddim(
            lambda x, t: x * t / (t + 1.0),
            deter_sample,
            schedule.alphas_cumprod_float64,
            timesteps,
            _next_listed(timesteps),
        )
        x = sampler.sample(dummy_model, deter_sample, schedule).numpy()
        np.testing.assert_allclose(x, expected, atol=2e-5, err_msg=spacing)
        default = DDIMSampler(num_steps, timestep_spacing=spacing, steps_offset=offset)
        assert (
            np.abs(default.sample(dummy_model, deter_sample, schedule) - x).max() > 1e-3
        )


def test_a_config_saved_without_the_rule_keeps_the_next_listed_one():
    # What DDIMSampler.get_config wrote before the option existed.
    old = {
        "num_steps": 7,
        "timestep_spacing": "trailing",
        "steps_offset": 0,
        "eta": 0.0,
        "clip_sample": False,
        "clip_sample_range": 1.0,
        "set_alpha_to_one": True,
    }
    assert DDIMSampler.from_config(old).previous_timestep == "next_listed"
    serialized = keras.saving.serialize_keras_object(DDIMSampler(**old))
    assert serialized["config"]["previous_timestep"] == "diffusers"
    del serialized["config"]["previous_timestep"]
    restored = keras.saving.deserialize_keras_object(serialized)
    assert restored.get_config() == {**old, "previous_timestep": "next_listed"}
    new = DDIMSampler(**old)
    assert DDIMSampler.from_config(new.get_config()).get_config() == new.get_config()


def test_previous_timestep_is_checked():
    with pytest.raises(ValueError, match="previous_timestep='next'"):
        DDIMSampler(previous_timestep="next")


def test_diffusers_trailing_list_ending_at_minus_one_warns_once(
    deter_sample, dummy_model, monkeypatch
):
    # diffusers lists 62 timesteps for 61 steps of 1,000, the last -1.
    monkeypatch.setattr(diffusers_lists, "_WARNED", set())
    schedule = NoiseSchedule()
    sampler = DDIMSampler(61, timestep_spacing="trailing")
    with pytest.warns(UserWarning) as record:
        sampler.sample(dummy_model, deter_sample, schedule)
        DDIMSampler(61, timestep_spacing="trailing").sample(
            dummy_model, deter_sample, schedule
        )
        sampler.timesteps(schedule)
    messages = [str(w.message) for w in record if "diffusers" in str(w.message)]
    assert len(messages) == 1, messages
    assert "num_steps=61" in messages[0] and "62 timesteps, the last -1" in messages[0]
    assert "Known differences" in messages[0] and "\n" not in messages[0]
    timesteps = sampler.timesteps(schedule)
    assert len(timesteps) == 61 and timesteps.min() == 15
