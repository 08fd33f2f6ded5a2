import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_diffusion import EDMSchedule


def test_preconditioning_limits():
    schedule = EDMSchedule(sigma_data=0.5)
    sd = schedule.sigma_data
    # sigma -> 0: D(x) = x, the identity on clean data; the input is x / sd.
    tiny = 1e-9
    assert schedule.c_skip(tiny) == pytest.approx(1.0, abs=1e-12)
    assert schedule.c_out(tiny) == pytest.approx(0.0, abs=1e-8)
    assert schedule.c_in(tiny) == pytest.approx(1 / sd)
    # sigma -> inf: D = sd * F, the skip vanishes, the input has unit variance.
    huge = 1e9
    assert schedule.c_skip(huge) == pytest.approx(0.0, abs=1e-12)
    assert schedule.c_out(huge) == pytest.approx(sd)
    assert schedule.c_in(huge) * huge == pytest.approx(1.0)
    sigma = np.geomspace(1e-3, 1e3, 25)
    # The network's input and training target have unit variance for data of
    # std sd (Karras et al., Appendix B.6), and lambda c_out^2 = 1.
    np.testing.assert_allclose(
        schedule.c_in(sigma) ** 2 * (sd**2 + sigma**2), 1.0, rtol=1e-12
    )
    target_var = (
        (1 - schedule.c_skip(sigma)) ** 2 * sd**2
        + schedule.c_skip(sigma) ** 2 * sigma**2
    ) / schedule.c_out(sigma) ** 2
    np.testing.assert_allclose(target_var, 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        schedule.loss_weight(sigma) * schedule.c_out(sigma) ** 2, 1.0, rtol=1e-12
    )
    np.testing.assert_allclose(schedule.c_noise(sigma), np.log(sigma) / 4)


def test_training_preconditioning_matches_the_schedule():
    schedule = EDMSchedule(sigma_data=0.7)
    sigma = np.geomspace(2e-3, 80.0, 9)
    got = schedule.preconditioning(tf.constant(sigma, tf.float32), ops)
    want = (
        schedule.c_skip(sigma),
        schedule.c_out(sigma),
        schedule.c_in(sigma),
        schedule.c_noise(sigma),
    )
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-7)


def test_sigmas_are_karras_eq_5():
    schedule = EDMSchedule(sigma_min=0.01, sigma_max=50.0, rho=5.0)
    n = 7
    i = np.arange(n)
    r = 1 / schedule.rho
    want = (50.0**r + i / (n - 1) * (0.01**r - 50.0**r)) ** schedule.rho
    np.testing.assert_allclose(schedule.sigmas(n), want, rtol=1e-13)
    assert schedule.sigmas(n)[0] == pytest.approx(50.0)
    assert schedule.sigmas(n)[-1] == pytest.approx(0.01)
    assert schedule.sigmas(n).dtype == np.float64


def test_sigmas_equal_diffusers_edm_sigmas():
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    scheduler = diffusers.EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, rho=7.0)
    scheduler.set_timesteps(18)
    np.testing.assert_allclose(
        EDMSchedule().sigmas(18), scheduler.sigmas.numpy()[:-1], rtol=1e-6
    )


def test_config_round_trip():
    schedule = EDMSchedule(0.01, 40.0, 0.3, 5.0, -1.0, 1.1)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(schedule)
    )
    assert isinstance(restored, EDMSchedule)
    assert restored.get_config() == schedule.get_config()
    assert "sigma_data=0.3" in repr(restored)


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"sigma_min": 1.0, "sigma_max": 1.0}, ValueError, "sigma_min=1.0"),
        ({"sigma_min": 5.0, "sigma_max": 2.0}, ValueError, "sigma_max=2.0"),
        ({"sigma_min": 0.0}, ValueError, "sigma_min"),
        ({"sigma_data": 0.0}, ValueError, "sigma_data"),
        ({"sigma_data": -0.5}, ValueError, "sigma_data"),
        ({"rho": 0.0}, ValueError, "rho"),
        ({"rho": -7.0}, ValueError, "rho"),
        ({"rho": 1e300}, ValueError, "rho=1e"),
        ({"rho": 1e-300}, ValueError, "rho=1e"),
        ({"p_std": 0.0}, ValueError, "p_std"),
        ({"p_mean": float("nan")}, ValueError, "p_mean"),
        ({"sigma_max": "80"}, TypeError, "sigma_max"),
    ],
)
def test_bad_arguments(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        EDMSchedule(**kwargs)
