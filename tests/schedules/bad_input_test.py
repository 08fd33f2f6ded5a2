"""NoiseSchedule and FlowMatchSchedule refuse bad input with a clear error
(tests/refusal.py)."""

import numpy as np
import pytest

from keras_diffusion import FlowMatchSchedule, NoiseSchedule
from tests import refusal
from tests.refusal import zeros

SCHEDULE = NoiseSchedule(10)

SCHEDULE_CASES = [
    ("T<2", lambda: NoiseSchedule(1), ValueError, ["num_train_timesteps=1"]),
    ("T float", lambda: NoiseSchedule(10.0), TypeError, ["num_train_timesteps=10.0"]),
    ("T str", lambda: NoiseSchedule("10"), TypeError, ["num_train_timesteps='10'"]),
    (
        "unknown schedule",
        lambda: NoiseSchedule(10, "quadratic"),
        ValueError,
        ["beta_schedule='quadratic'"],
    ),
    (
        "schedule not a str",
        lambda: NoiseSchedule(10, np.array([1, 2])),
        ValueError,
        ["beta_schedule=array([1, 2])"],
    ),
    (
        "beta_start 0",
        lambda: NoiseSchedule(10, beta_start=0.0),
        ValueError,
        ["beta_start=0.0"],
    ),
    (
        "beta_end 1",
        lambda: NoiseSchedule(10, beta_end=1.0),
        ValueError,
        ["beta_end=1.0"],
    ),
    (
        "beta negative",
        lambda: NoiseSchedule(10, beta_start=-0.1),
        ValueError,
        ["beta_start=-0.1"],
    ),
    (
        "beta nan",
        lambda: NoiseSchedule(10, beta_end=float("nan")),
        ValueError,
        ["beta_end=nan"],
    ),
    (
        "beta str",
        lambda: NoiseSchedule(10, beta_end="0.02"),
        TypeError,
        ["beta_end='0.02'"],
    ),
    (
        "betas reversed",
        lambda: NoiseSchedule(10, beta_start=0.2, beta_end=0.1),
        ValueError,
        ["beta_start=0.2", "beta_end=0.1"],
    ),
    (
        "rescale not bool",
        lambda: NoiseSchedule(10, rescale_zero_terminal_snr="yes"),
        TypeError,
        ["rescale_zero_terminal_snr='yes'"],
    ),
    (
        "trained_betas length",
        lambda: NoiseSchedule(3, trained_betas=[0.1, 0.2]),
        ValueError,
        ["trained_betas", "(2,)"],
    ),
    (
        "trained_betas range",
        lambda: NoiseSchedule(3, trained_betas=[0.1, 0.2, 1.0]),
        ValueError,
        ["trained_betas", "max=1.0"],
    ),
    (
        "trained_betas str",
        lambda: NoiseSchedule(3, trained_betas="abc"),
        TypeError,
        ["trained_betas='abc'"],
    ),
    (
        "add_noise integer images",
        lambda: SCHEDULE.add_noise(
            zeros((2, 4), "int32"), zeros((2, 4)), np.array([0, 1])
        ),
        TypeError,
        ["x0", "int32"],
    ),
    (
        "add_noise t >= T",
        lambda: SCHEDULE.add_noise(zeros((2, 4)), zeros((2, 4)), np.array([0, 10])),
        ValueError,
        ["`t`", "[0, 10]"],
    ),
    (
        "add_noise t < 0",
        lambda: SCHEDULE.add_noise(zeros((2, 4)), zeros((2, 4)), np.array([-1, 1])),
        ValueError,
        ["`t`", "[-1, 1]"],
    ),
    (
        "add_noise noise shape",
        lambda: SCHEDULE.add_noise(zeros((2, 4)), zeros((2, 5)), np.array([0, 1])),
        ValueError,
        ["noise.shape=(2, 5)"],
    ),
    (
        "add_noise t per example",
        lambda: SCHEDULE.velocity(zeros((2, 4)), zeros((2, 4)), np.array([0, 1, 2])),
        ValueError,
        ["`t`", "(3,)"],
    ),
    (
        "snr t float out of range",
        lambda: SCHEDULE.snr(np.array([9.5], "float32")),
        ValueError,
        ["`t`", "9.5"],
    ),
]


@pytest.mark.parametrize("call, error, fragments", refusal.params(SCHEDULE_CASES))
def test_bad_input_is_refused_with_a_clear_message(call, error, fragments):
    refusal.assert_refused_twice(call, error, fragments)


FLOW_CASES = [
    ("shift 0", lambda: FlowMatchSchedule(shift=0.0), ValueError, ["shift=0.0"]),
    ("shift < 0", lambda: FlowMatchSchedule(shift=-3.0), ValueError, ["shift=-3.0"]),
    (
        "unknown sampling",
        lambda: FlowMatchSchedule(timestep_sampling="lognorm"),
        ValueError,
        ["timestep_sampling='lognorm'", "'logit_normal'"],
    ),
    (
        "logit_std 0",
        lambda: FlowMatchSchedule(logit_std=0.0),
        ValueError,
        ["logit_std=0.0"],
    ),
    (
        "logit_mean nan",
        lambda: FlowMatchSchedule(logit_mean=float("nan")),
        ValueError,
        ["logit_mean=nan"],
    ),
    (
        "mode_scale past monotone",
        lambda: FlowMatchSchedule(timestep_sampling="mode", mode_scale=2.0),
        ValueError,
        ["mode_scale=2.0"],
    ),
    ("T 1", lambda: FlowMatchSchedule(1), ValueError, ["num_train_timesteps=1"]),
]


@pytest.mark.parametrize("call, error, fragments", refusal.params(FLOW_CASES))
def test_flow_schedule_refuses_bad_input(call, error, fragments):
    refusal.assert_refused_twice(call, error, fragments)


def test_flow_schedule_round_trips_its_config():
    schedule = FlowMatchSchedule(7, 2.5, "mode", 0.1, 0.9, 1.1)
    again = FlowMatchSchedule.from_config(schedule.get_config())
    assert again.get_config() == schedule.get_config()
    assert repr(again) == repr(schedule)
