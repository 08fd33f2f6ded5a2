"""`compile(jit_compile="auto")`: XLA or graph mode by timing, recorded and reused."""

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.models import jit_choice
from tests.models.xla_test import host_denoiser


def _model(make_denoiser, **compile_options):
    keras.utils.set_random_seed(3)
    model = DiffusionModel(make_denoiser(), NoiseSchedule(100, "cosine"), seed=5)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), **compile_options)
    return model


def _conv_denoiser():
    """Two time-conditioned convolutions: XLA compiles them in a fraction of
    a U-Net's time, and the state a measurement touches is the same (the
    weights, the optimizer, the EMA, the noise seed)."""
    x_in, t_in = keras.Input((8, 8, 1)), keras.Input(())
    shift = keras.layers.Dense(4)(keras.layers.Reshape((1,))(t_in))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="silu")(x_in)
    h = h + keras.layers.Reshape((1, 1, 4))(shift)
    return keras.Model([x_in, t_in], keras.layers.Conv2D(1, 3, padding="same")(h))


@pytest.fixture
def measure_always(monkeypatch):
    """Every run counts as long enough to repay XLA's compilation."""
    monkeypatch.setattr(jit_choice, "XLA_GAIN_TO_REPAY", 1e9)


def test_a_short_run_keeps_graph_mode_without_compiling_xla(
    make_unet, toy_images, capsys
):
    model = _model(make_unet)
    model.fit(toy_images, batch_size=16, epochs=2, verbose=2)
    line = [s for s in capsys.readouterr().out.splitlines() if "jit_compile=" in s]
    assert len(line) == 1 and "graph mode" in line[0] and "too few" in line[0]
    assert model.jit_compile is False
    assert model.get_compile_config()["jit_choice"] is False


def test_measuring_leaves_the_run_as_if_compiled_with_the_choice(
    toy_images, measure_always, monkeypatch, capsys
):
    # Both forms are compiled and timed; graph mode is kept whatever the
    # timings, so that the reference run below needs no XLA compilation.
    monkeypatch.setattr(jit_choice, "XLA_MARGIN", 1.0)
    model = _model(_conv_denoiser)
    history = model.fit(toy_images, batch_size=16, epochs=2, verbose=0, shuffle=False)
    assert capsys.readouterr().out == ""  # verbose=0: no line
    chosen = model.jit_compile
    assert chosen is False and model.get_compile_config()["jit_choice"] is False

    direct = _model(_conv_denoiser, jit_compile=chosen)
    expected = direct.fit(toy_images, batch_size=16, epochs=2, verbose=0, shuffle=False)
    # The timed steps trained on a batch; every variable they changed was put back.
    np.testing.assert_allclose(
        history.history["loss"], expected.history["loss"], rtol=1e-5
    )
    for a, b in zip(model.weights, direct.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_the_choice_is_reused_by_a_second_fit_and_a_loaded_model(
    make_unet, toy_images, tmp_path, monkeypatch
):
    model = _model(make_unet)
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    chosen = model.jit_compile
    assert chosen is False  # a short run: graph mode, XLA never compiled

    def no_second_measurement(*args, **kwargs):
        raise AssertionError("measured again")

    monkeypatch.setattr(jit_choice, "choose", no_second_measurement)
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.jit_compile is chosen
    loaded.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    assert loaded.get_compile_config()["jit_choice"] is chosen


def test_an_explicit_choice_is_never_measured(make_unet, toy_images, monkeypatch):
    monkeypatch.setattr(jit_choice, "choose", None)  # would fail if called
    model = _model(make_unet, jit_compile=True)
    assert model.jit_compile is True and "jit_choice" not in model.get_compile_config()
    model = _model(make_unet, jit_compile=False)
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    assert model.jit_compile is False and "jit_choice" not in model.get_compile_config()


def test_a_step_xla_cannot_compile_is_measured_as_graph_mode(
    toy_images, measure_always, capsys
):
    model = DiffusionModel(host_denoiser(), NoiseSchedule(100, "cosine"))
    model.compile(optimizer="adam")
    with pytest.warns(UserWarning, match="XLA could not compile"):
        model.fit(toy_images, batch_size=16, epochs=1, verbose=1)
    assert "graph mode: XLA could not compile" in capsys.readouterr().out
    assert model.jit_compile is False


def test_measure_jit_compile_decides_once_for_the_run_it_is_told(
    make_unet, toy_images, monkeypatch, capsys
):
    model = _model(make_unet)
    assert model.measure_jit_compile(toy_images, run_steps=4, batch_size=16) is False
    assert "the run's 4 steps are too few" in capsys.readouterr().out
    monkeypatch.setattr(jit_choice, "choose", None)  # would fail if called
    assert model.measure_jit_compile(toy_images, run_steps=10**9) is False
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    assert model.jit_compile is False


@pytest.mark.parametrize(
    "kwargs, error",
    [({"run_steps": 0}, ValueError), ({"epoch_steps": 2.5}, TypeError)],
)
def test_bad_measure_arguments_are_refused(make_unet, toy_images, kwargs, error):
    model = _model(make_unet)
    name = next(iter(kwargs))
    with pytest.raises(error, match=f"{name}="):
        model.measure_jit_compile(toy_images, **kwargs)
    assert model.get_compile_config()["jit_choice"] is None  # nothing decided
