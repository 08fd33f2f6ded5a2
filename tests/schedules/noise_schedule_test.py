import inspect
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_diffusion import NoiseSchedule
from keras_diffusion.schedules.process import TrainingStep


def test_linear_known_values():
    schedule = NoiseSchedule(1000, "linear")
    assert schedule.betas.dtype == np.float32
    assert schedule.alphas_cumprod.dtype == np.float32
    assert schedule.betas.shape == (1000,)
    np.testing.assert_allclose(schedule.betas[[0, -1]], [1e-4, 0.02], rtol=1e-6)
    np.testing.assert_allclose(schedule.alphas_cumprod[0], 0.9999, rtol=1e-7)
    np.testing.assert_allclose(schedule.alphas_cumprod[-1], 4.0358e-5, rtol=1e-4)


def test_scaled_linear_is_square_of_linear_in_sqrt_space():
    schedule = NoiseSchedule(10, "scaled_linear", beta_start=0.00085, beta_end=0.012)
    expected = np.linspace(0.00085**0.5, 0.012**0.5, 10) ** 2
    np.testing.assert_allclose(schedule.betas, expected, rtol=1e-6)


@pytest.mark.parametrize("name", ["cosine", "squaredcos_cap_v2"])
def test_cosine_follows_closed_form_alpha_bar(name):
    T = 1000
    schedule = NoiseSchedule(T, name)

    def f(t):
        return np.cos((t / T + 0.008) / 1.008 * np.pi / 2) ** 2

    t = np.arange(T - 1)  # the last beta is clipped at 0.999
    np.testing.assert_allclose(
        schedule.alphas_cumprod[: T - 1], f(t + 1) / f(0), rtol=1e-5, atol=1e-7
    )
    assert schedule.betas.max() <= 0.999 + 1e-7


def test_sigmoid_betas_are_symmetric_about_the_midpoint():
    schedule = NoiseSchedule(100, "sigmoid", beta_start=1e-4, beta_end=0.02)
    pairs = schedule.betas_float64 + schedule.betas_float64[::-1]
    np.testing.assert_allclose(pairs, 1e-4 + 0.02, rtol=1e-12)
    assert np.all(np.diff(schedule.betas) > 0)


def test_zero_terminal_snr_rescale():
    plain = NoiseSchedule(1000, "scaled_linear", beta_start=0.00085, beta_end=0.012)
    rescaled = NoiseSchedule(
        1000,
        "scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        rescale_zero_terminal_snr=True,
    )
    assert rescaled.alphas_cumprod[-1] == 0.0
    np.testing.assert_allclose(
        rescaled.alphas_cumprod[0], plain.alphas_cumprod[0], rtol=1e-6
    )
    # sqrt(abar) is an affine map of the original sqrt(abar).
    a, b = (
        np.sqrt(plain.alphas_cumprod_float64),
        np.sqrt(rescaled.alphas_cumprod_float64),
    )
    slope, intercept = np.polyfit(a, b, 1)
    np.testing.assert_allclose(slope * a + intercept, b, atol=1e-9)
    assert float(ops.convert_to_numpy(rescaled.snr(np.array([999])))[0]) == 0.0


def test_min_snr_on_zero_terminal_snr_warns_when_the_model_is_built():
    from keras_diffusion import DiffusionModel
    from tests.denoisers import tiny_unet

    schedule = NoiseSchedule(20, rescale_zero_terminal_snr=True)
    with pytest.warns(UserWarning, match=r"'min_snr'.*t=19, whose SNR is 0.* 0:"):
        DiffusionModel(tiny_unet(), schedule, "v_prediction", loss_weighting="min_snr")
    weight = ops.convert_to_numpy(
        schedule.min_snr_weight(np.arange(20), "v_prediction", 5.0)
    )
    assert weight[-1] == 0.0  # what it warns of
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DiffusionModel(tiny_unet(), NoiseSchedule(20), loss_weighting="min_snr")


def test_add_noise_velocity_and_snr_closed_forms():
    schedule = NoiseSchedule(50)
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(4, 3, 3, 2)).astype("float32")
    noise = rng.normal(size=x0.shape).astype("float32")
    t = np.array([0, 10, 25, 49])
    abar = schedule.alphas_cumprod_float64[t][:, None, None, None]

    clean = ops.convert_to_numpy(schedule.add_noise(x0, np.zeros_like(x0), t))
    np.testing.assert_allclose(clean, np.sqrt(abar) * x0, rtol=1e-5)
    x_t = ops.convert_to_numpy(schedule.add_noise(x0, noise, t))
    np.testing.assert_allclose(
        x_t, np.sqrt(abar) * x0 + np.sqrt(1 - abar) * noise, rtol=1e-5, atol=1e-6
    )
    v = ops.convert_to_numpy(schedule.velocity(x0, noise, t))
    # x0 = sqrt(abar) x_t - sqrt(1 - abar) v  (Salimans & Ho, 2022).
    np.testing.assert_allclose(
        np.sqrt(abar) * x_t - np.sqrt(1 - abar) * v, x0, rtol=1e-4, atol=1e-5
    )
    snr = ops.convert_to_numpy(schedule.snr(t))
    np.testing.assert_allclose(snr, abar.ravel() / (1 - abar.ravel()), rtol=1e-4)


def test_float_timesteps_interpolate_and_match_integers():
    schedule = NoiseSchedule(20)
    x0 = np.ones((3, 2), "float32")
    zeros = np.zeros_like(x0)
    by_int = ops.convert_to_numpy(schedule.add_noise(x0, zeros, np.array([3, 4, 5])))
    by_float = ops.convert_to_numpy(
        schedule.add_noise(x0, zeros, np.array([3.0, 4.0, 5.0], "float32"))
    )
    np.testing.assert_allclose(by_int, by_float, rtol=1e-6)
    half = ops.convert_to_numpy(
        schedule.add_noise(x0, zeros, np.array([3.5, 3.5, 3.5], "float32"))
    )
    abar = schedule.alphas_cumprod_float64
    np.testing.assert_allclose(
        half[:, 0], (np.sqrt(abar[3]) + np.sqrt(abar[4])) / 2, rtol=1e-5
    )


def test_schedule_maths_stays_float32_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    schedule = NoiseSchedule(1000)
    x0 = ops.ones((2, 4), dtype="float16")
    out = schedule.add_noise(x0, ops.zeros((2, 4), "float16"), np.array([0, 999]))
    assert out.dtype == "float16"
    assert schedule.snr(np.array([999])).dtype == "float32"
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(out, "float32"))[1, 0],
        np.sqrt(schedule.alphas_cumprod_float64[999]),
        rtol=1e-3,
    )


def test_config_round_trip():
    schedule = NoiseSchedule(
        30,
        "cosine",
        rescale_zero_terminal_snr=True,
        prediction_type="v_prediction",
        min_snr_gamma=3.0,
    )
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(schedule)
    )
    assert restored.get_config() == schedule.get_config()
    assert restored.get_config()["prediction_type"] == "v_prediction"
    assert restored.get_config()["min_snr_gamma"] == 3.0
    np.testing.assert_array_equal(restored.alphas_cumprod, schedule.alphas_cumprod)


def test_the_positional_arguments_keep_their_order():
    # The objective's arguments come after those of earlier releases.
    schedule = NoiseSchedule(5, "linear", 1e-3, 0.2, False, [0.1] * 5, "sample")
    assert (schedule.beta_start, schedule.beta_end) == (1e-3, 0.2)
    assert schedule.trained_betas == [0.1] * 5
    assert schedule.prediction_type == "sample"


def _zero_network_step(x0):
    """A `TrainingStep` of `x0` whose network returns zeros."""
    return TrainingStep(
        x0=ops.convert_to_tensor(x0),
        labels=None,
        seeds=(np.array([1, 2], "int32"), np.array([3, 4], "int32")),
        training=False,
        call_denoiser=lambda inputs, training: ops.zeros_like(inputs[0]),
    )


def test_training_loss_is_the_schedules_own_objective():
    x0 = np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 1)).astype("float32")
    step = _zero_network_step(x0)
    mean_x0 = float(np.mean(x0.astype(np.float64) ** 2))
    mean_noise = float(np.mean(ops.convert_to_numpy(step.noise()) ** 2))
    # A zero output: its MSE to x0 (sample), to the noise (epsilon).
    sample = NoiseSchedule(100, prediction_type="sample")
    assert float(sample.training_loss(step)) == pytest.approx(mean_x0, rel=1e-5)
    epsilon = NoiseSchedule(100)
    assert float(epsilon.training_loss(step)) == pytest.approx(mean_noise, rel=1e-5)
    # Min-SNR's weight of the x0 loss is min(snr, gamma): gamma, below every
    # SNR of the schedule.
    gamma = 1e-6
    assert NoiseSchedule(100).snr(np.arange(100)).numpy().min() > gamma
    weighted = NoiseSchedule(
        100, prediction_type="sample", loss_weighting="min_snr", min_snr_gamma=gamma
    )
    loss = float(weighted.training_loss(step))
    assert loss == pytest.approx(gamma * mean_x0, rel=1e-5)


def test_objective_settings_are_the_ones_with_objective_sets():
    # Declared `objective`: set by `with_objective` (as DiffusionModel's
    # arguments), neither a constructor argument of a run nor a run value.
    objective = {s.name for s in NoiseSchedule.settings if s.objective}
    arguments = set(inspect.signature(NoiseSchedule.with_objective).parameters)
    assert objective == arguments - {"self", "replace"}
    schedule = NoiseSchedule.from_run_settings({"prediction_type": "sample"})
    assert schedule.prediction_type == "epsilon"
    assert objective.isdisjoint(schedule.run_values())


def test_trained_betas_replace_the_named_schedule():
    betas = np.full(5, 0.1)
    schedule = NoiseSchedule(5, trained_betas=betas)
    np.testing.assert_allclose(
        schedule.alphas_cumprod, 0.9 ** np.arange(1, 6), rtol=1e-6
    )


@pytest.mark.parametrize(
    "kwargs, error, fragment",
    [
        ({"num_train_timesteps": 1}, ValueError, "num_train_timesteps=1"),
        ({"num_train_timesteps": 10.0}, TypeError, "num_train_timesteps=10.0"),
        ({"beta_schedule": "quadratic"}, ValueError, "beta_schedule='quadratic'"),
        ({"beta_start": 0.0}, ValueError, "beta_start=0.0"),
        ({"beta_end": 1.5}, ValueError, "beta_end=1.5"),
        ({"beta_end": "0.02"}, TypeError, "beta_end='0.02'"),
        ({"beta_start": 0.05, "beta_end": 0.01}, ValueError, "beta_start=0.05"),
        ({"prediction_type": "eps"}, ValueError, "prediction_type='eps'"),
        ({"loss_weighting": "snr"}, ValueError, "loss_weighting='snr'"),
        ({"min_snr_gamma": 0.0}, ValueError, "min_snr_gamma=0.0"),
        ({"min_snr_gamma": "5"}, TypeError, "min_snr_gamma='5'"),
        (
            {"num_train_timesteps": 3, "trained_betas": [0.1, 1.2, 0.3]},
            ValueError,
            "trained_betas",
        ),
        (
            {"num_train_timesteps": 3, "trained_betas": [0.1, 0.2]},
            ValueError,
            "trained_betas",
        ),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        NoiseSchedule(**kwargs)
