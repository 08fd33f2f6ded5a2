"""Power-function EMA profiles (EDM2): their widths and their update."""

import keras
import numpy as np
import pytest

from keras_diffusion.averages import power_ema
from keras_diffusion.averages.power_ema import PowerFunctionEMA, gamma_of, sigma_rel_of


def test_gamma_and_sigma_rel_are_inverse_and_match_the_papers_pairs():
    # EDM2, section 3.1: sigma_rel 0.05 and 0.10 are gamma 16.97 and 6.94.
    assert gamma_of(0.05) == pytest.approx(16.97, abs=0.005)
    assert gamma_of(0.10) == pytest.approx(6.94, abs=0.005)
    for sigma_rel in (0.01, 0.05, 0.1, 0.2, 0.27):
        assert sigma_rel_of(gamma_of(sigma_rel)) == pytest.approx(sigma_rel, rel=1e-9)


@pytest.mark.parametrize("value", [0.0, 0.3, -0.1, "0.05", [], [0.05, 0.5], None])
def test_bad_widths_are_refused_by_name(value):
    if value is None:
        assert power_ema.check_sigma_rels("posthoc_ema", value) is None
        return
    with pytest.raises(ValueError, match="posthoc_ema"):
        power_ema.check_sigma_rels("posthoc_ema", value)


def _track(values, sigma_rels, applied=None):
    """A scalar variable set to each of `values` in turn, tracked."""
    variable = keras.Variable(np.float32(values[0]))
    tracker = PowerFunctionEMA([variable], sigma_rels)
    for i, value in enumerate(values):
        variable.assign(np.float32(value))
        tracker.update([variable], None if applied is None else applied[i])
    return tracker


def test_the_update_equals_the_closed_form_on_a_scalar():
    # theta_hat(t) = sum_i ((i/t)^(g+1) - ((i-1)/t)^(g+1)) theta(i): the
    # paper's integral over weights held constant between updates.
    rng = np.random.default_rng(0)
    values = rng.normal(size=300)
    tracker = _track(values, (0.05, 0.2))
    for gamma, (shadow,) in zip(tracker.gammas, tracker.values(), strict=True):
        expected = power_ema.weights(gamma, len(values)) @ values
        np.testing.assert_allclose(shadow, expected, rtol=0, atol=2e-5)
    assert tracker.updates() == 300


def test_a_step_without_an_update_leaves_the_profiles_alone():
    # Gradient accumulation: the weights move once in K calls, and so do
    # the profiles; the other calls neither average nor count.
    values = np.arange(12, dtype=np.float64)
    applied = [i % 3 == 2 for i in range(12)]
    tracker = _track(values, (0.1,), applied)
    assert tracker.updates() == 4
    expected = power_ema.weights(tracker.gammas[0], 4) @ values[2::3]
    np.testing.assert_allclose(tracker.values()[0][0], expected, atol=1e-5)
