"""Where diffusers' "trailing" timesteps differ from ours: named, once a (T, n).

tests/samplers/diffusers_parity_test.py pins `diffusers_trailing` against
every diffusers scheduler at every step count of T = 1000.
"""

import numpy as np
import pytest

from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
)
from keras_diffusion.schedules import diffusers_lists
from keras_diffusion.schedules.noise_schedule import NoiseSchedule


def test_a_rounding_tie_is_named():
    # 48 steps: diffusers has 936 where exact arithmetic (and this list) has 937.
    ours = np.round(1000 - np.arange(48) * 1000 / 48) - 1
    message = diffusers_lists.trailing_difference(1000, 48, ours)
    assert "936 where this sampler has 937" in message and "\n" not in message
    for num_steps in (1, 7, 10, 50, 999, 1000):
        ours = np.round(1000 - np.arange(num_steps) * 1000 / num_steps) - 1
        assert diffusers_lists.trailing_difference(1000, num_steps, ours) is None


@pytest.mark.parametrize(
    "sampler_class",
    [DDPMSampler, DDIMSampler, DPMSolverSampler, EulerSampler, HeunSampler],
)
def test_every_sampler_warns_once_where_diffusers_ends_at_minus_one(
    sampler_class, monkeypatch
):
    monkeypatch.setattr(diffusers_lists, "_WARNED", set())
    sampler = sampler_class(61, timestep_spacing="trailing")
    with pytest.warns(UserWarning, match="62 timesteps, the last -1") as record:
        sampler.timesteps(NoiseSchedule())
        sampler.timesteps(NoiseSchedule())
    assert len(record) == 1
    # Another T is another list, which differs too: one more warning.
    with pytest.warns(UserWarning, match="num_train_timesteps=500"):
        sampler.timesteps(NoiseSchedule(num_train_timesteps=500))
    assert diffusers_lists._WARNED == {(1000, 61), (500, 61)}
