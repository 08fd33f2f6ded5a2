"""The samplers refuse bad input with a clear error (tests/refusal.py)."""

import numpy as np
import pytest

from keras_diffusion import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    NoiseSchedule,
)
from tests import refusal
from tests.refusal import zeros

SAMPLERS = (DDPMSampler, DDIMSampler, DPMSolverSampler, EulerSampler, HeunSampler)
SCHEDULE = NoiseSchedule(10)


def _sample(sampler, x_T=None, prediction_type="epsilon", **kwargs):
    x_T = zeros((2, 4)) if x_T is None else x_T
    return sampler.sample(
        lambda x, t: 0.5 * x, x_T, SCHEDULE, prediction_type, **kwargs
    )


def _sampler_cases():
    cases = []
    for cls in SAMPLERS:
        name = cls.__name__
        cases += [
            (
                f"{name} num_steps 0",
                lambda cls=cls: cls(num_steps=0),
                ValueError,
                ["num_steps=0"],
            ),
            (
                f"{name} num_steps str",
                lambda cls=cls: cls(num_steps="5"),
                TypeError,
                ["num_steps='5'"],
            ),
            (
                f"{name} num_steps > T",
                lambda cls=cls: _sample(cls(num_steps=11)),
                ValueError,
                ["num_steps=11", "num_train_timesteps=10"],
            ),
            (
                f"{name} spacing",
                lambda cls=cls: cls(timestep_spacing="middle"),
                ValueError,
                ["timestep_spacing='middle'"],
            ),
            (
                f"{name} prediction type",
                lambda cls=cls: _sample(cls(num_steps=2), prediction_type="eps"),
                ValueError,
                ["prediction_type='eps'"],
            ),
            (
                f"{name} integer noise",
                lambda cls=cls: _sample(cls(num_steps=2), zeros((2, 4), "int32")),
                TypeError,
                ["x_T", "int32"],
            ),
        ]
    return cases


SAMPLER_CASES = _sampler_cases() + [
    ("negative eta", lambda: DDIMSampler(eta=-0.5), ValueError, ["eta=-0.5"]),
    ("eta nan", lambda: DDIMSampler(eta=float("nan")), ValueError, ["eta=nan"]),
    ("eta str", lambda: DDIMSampler(eta="0"), TypeError, ["eta='0'"]),
    (
        "clip range",
        lambda: DDIMSampler(clip_sample_range=0.0),
        ValueError,
        ["clip_sample_range=0.0"],
    ),
    (
        "steps_offset beyond T",
        lambda: _sample(DDIMSampler(num_steps=5, steps_offset=9)),
        ValueError,
        ["steps_offset=9"],
    ),
    (
        # n + 1 "linspace" points on T = n timesteps repeat a noise level.
        "DPM-Solver steps = T with linspace spacing",
        lambda: _sample(DPMSolverSampler(num_steps=10)),
        ValueError,
        ["num_steps=10", "timestep_spacing='linspace'"],
    ),
    (
        "final_sigmas_type",
        lambda: DPMSolverSampler(final_sigmas_type="one"),
        ValueError,
        ["final_sigmas_type='one'"],
    ),
    (
        "schedule not a schedule",
        lambda: DDIMSampler(2).sample(lambda x, t: x, zeros((1, 4)), "linear"),
        TypeError,
        ["schedule='linear'"],
    ),
    (
        "denoise_fn not callable",
        lambda: DDIMSampler(2).sample(3, zeros((1, 4)), SCHEDULE),
        TypeError,
        ["denoise_fn", "3"],
    ),
    (
        "noise of no batch",
        lambda: _sample(DDIMSampler(2), np.float32(0.0)),
        ValueError,
        ["x_T", "shape ()"],
    ),
    (
        "noise of strings",
        lambda: _sample(DDIMSampler(2), np.array(["a", "b"])),
        TypeError,
        ["x_T", "string"],
    ),
    (
        "seed str",
        lambda: _sample(DDPMSampler(2), seed="a"),
        TypeError,
        ["seed='a'"],
    ),
    (
        # By design: x0 is undefined where alphas_cumprod is 0.
        "epsilon on zero terminal SNR",
        lambda: DDIMSampler(2, timestep_spacing="trailing").sample(
            lambda x, t: x,
            zeros((1, 4)),
            NoiseSchedule(10, rescale_zero_terminal_snr=True),
        ),
        ValueError,
        ["prediction_type='epsilon'"],
    ),
]


@pytest.mark.parametrize("call, error, fragments", refusal.params(SAMPLER_CASES))
def test_bad_input_is_refused_with_a_clear_message(call, error, fragments):
    refusal.assert_refused_twice(call, error, fragments)
