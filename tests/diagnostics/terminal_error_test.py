"""The sampling check: the denoiser's error at the highest timesteps."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_diffusion import DiffusionModel, NoiseSchedule, diagnostics
from keras_diffusion.diagnostics import terminal_error
from keras_diffusion.run import training
from keras_diffusion.run.config import TrainConfig
from tests.denoisers import conv_denoiser

CONSTANT = 0.5  # the one image of the exact denoiser's data set


def linear_300():
    """The schedule of issue 25's run: T=300, betas scaled to end in noise."""
    return NoiseSchedule(300, "linear", beta_start=1e-4 * 1000 / 300, beta_end=0.2 / 3)


class ExactDenoiser(keras.layers.Layer):
    """Predicts the exact epsilon for data that is one constant image."""

    def __init__(self, schedule, **kwargs):
        super().__init__(**kwargs)
        self.abar = np.asarray(schedule.alphas_cumprod, np.float32)

    def call(self, inputs):
        x_t, t = inputs
        abar = ops.take(ops.convert_to_tensor(self.abar), ops.cast(t, "int32"))
        abar = ops.reshape(abar, (-1, 1, 1, 1))
        return (x_t - ops.sqrt(abar) * CONSTANT) / ops.sqrt(1.0 - abar)


def exact_model():
    schedule = linear_300()
    x_t, t = keras.Input((8, 8, 1)), keras.Input(())
    denoiser = keras.Model([x_t, t], ExactDenoiser(schedule)([x_t, t]))
    return DiffusionModel(denoiser, schedule, image_shape=(8, 8, 1), seed=0)


def fresh_model(make_unet):
    """A deliberately undertrained model: epsilon prediction, linear T=300."""
    return DiffusionModel(make_unet(), linear_300(), seed=0)


def test_top_timesteps_cover_the_last_two_percent():
    assert terminal_error.top_timesteps(300) == (294, 296, 297, 299)
    assert terminal_error.top_timesteps(1000) == (980, 986, 993, 999)
    assert terminal_error.top_timesteps(10) == (9,)


def test_an_undertrained_epsilon_model_on_a_linear_schedule_warns(
    make_unet, toy_images
):
    result = diagnostics.measure_terminal_error(fresh_model(make_unet), toy_images)
    assert result.timesteps == (294, 296, 297, 299)
    # x0 error = epsilon error * (1 - abar) / abar: thousands of times the data
    assert result.ratio > 1000 and not result.ok
    assert result.final_alpha_cumprod == pytest.approx(3.4e-5, rel=0.01)
    message = result.warning(steps=10, learning_rate=2e-4)
    assert "\n" not in message
    assert message.startswith("Sampling will likely give noise")
    assert "10 steps at lr 0.0002" in message
    assert "prediction_type='v_prediction'" in message
    assert f"{result.x0_mse:.3g}" in message


def test_the_exact_denoiser_passes_and_its_zero_output_fails():
    model = exact_model()
    images = np.full((16, 8, 8, 1), CONSTANT, np.float32)
    result = diagnostics.measure_terminal_error(model, images)
    assert result.x0_mse < 1e-6 and result.epsilon_mse < 1e-8
    assert result.ok and result.warning() is None


def test_x0_error_matches_the_closed_form_of_a_zero_epsilon(make_unet):
    # A fresh U-Net's output is near 0: x0_hat = x_t / sqrt(abar), whose
    # error is noise * sqrt((1 - abar) / abar).
    zero = keras.Model(
        inputs := [keras.Input((8, 8, 1)), keras.Input(())],
        keras.layers.Lambda(lambda x: x * 0.0)(inputs[0]),
    )
    model = DiffusionModel(zero, linear_300(), seed=0)
    images = np.zeros((64, 8, 8, 1), np.float32)
    result = diagnostics.measure_terminal_error(model, images, seed=3)
    abar = model.schedule.alphas_cumprod[list(result.timesteps)]
    expected = np.mean((1 - abar) / abar)
    assert result.x0_mse == pytest.approx(expected, rel=0.05)
    assert result.epsilon_mse == pytest.approx(1.0, rel=0.05)


def test_deterministic_for_a_seed(make_unet, toy_images):
    model = fresh_model(make_unet)
    first = diagnostics.measure_terminal_error(model, toy_images, seed=1)
    again = diagnostics.measure_terminal_error(model, toy_images, seed=1)
    assert first == again


def test_the_callback_warns_once_after_fit(toy_images):
    # A conv denoiser in graph mode: as untrained as the U-Net, and quick to
    # compile (the U-Net's own terminal error is checked above).
    model = fresh_model(conv_denoiser)
    model.compile(optimizer=keras.optimizers.Adam(2e-4), jit_compile=False)
    check = diagnostics.SamplingCheck(toy_images, every=1)
    with pytest.warns(UserWarning, match="Sampling will likely give noise") as seen:
        model.fit(toy_images, batch_size=32, epochs=1, verbose=0, callbacks=[check])
    # Checked after the epoch; the end of training, at the same step, is silent.
    ours = [str(w.message) for w in seen if "Sampling" in str(w.message)]
    assert len(ours) == 1
    assert "2 steps at lr 0.0002" in ours[0]
    assert not check.result.ok


def test_the_callback_is_silent_on_the_exact_denoiser():
    model = exact_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    lines = []
    check = diagnostics.SamplingCheck(np.full((8, 8, 8, 1), CONSTANT), log=lines.append)
    check.set_model(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check.on_train_end()
    assert lines == [] and check.result.ok


def test_bad_arguments_name_the_value(make_unet, toy_images):
    model = fresh_model(make_unet)
    with pytest.raises(ValueError, match=r"\(64, 4, 4, 1\)"):
        diagnostics.measure_terminal_error(model, toy_images[:, :4, :4])
    with pytest.raises(ValueError, match="fraction=0"):
        diagnostics.measure_terminal_error(model, toy_images, fraction=0.0)
    conditional = DiffusionModel(make_unet(num_classes=3), linear_300())
    with pytest.raises(ValueError, match="labels"):
        diagnostics.measure_terminal_error(conditional, toy_images)
    with pytest.raises(TypeError, match="every='1'"):
        diagnostics.SamplingCheck(toy_images, every="1")


def test_a_training_run_says_so_in_one_line(tmp_path):
    """Issue 25's settings (epsilon, linear T=300), far too short: one line.

    A one-level U-Net: the check measures any model, and its trace is
    shorter."""
    config = TrainConfig(
        epochs=1,
        widths=[8],
        num_res_blocks=1,
        num_samples=4,
        sampling_steps=2,
        jit_compile=False,
        schedule="linear",
        timesteps=300,
        prediction_type="epsilon",
        learning_rate=2e-4,
    )
    lines = []
    training.train(config, str(tmp_path / "run"), verbose=0, log=lines.append)
    ours = [line for line in lines if "Sampling will likely give noise" in line]
    assert len(ours) == 1, lines
    assert "\n" not in ours[0].strip()
    assert "epsilon prediction on a linear schedule" in ours[0]
    # The peak of the run's cosine decay, not its final 0.
    assert "at lr 0.0002" in ours[0]
