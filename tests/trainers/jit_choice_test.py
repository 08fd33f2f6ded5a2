"""`compile(jit_compile="auto")`: XLA or graph mode by timing, recorded and reused."""

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.trainers import execution, jit_choice
from tests.denoisers import conv_denoiser

# These tests are about jit_compile="auto" itself (tests/conftest.py).
pytestmark = pytest.mark.xla


def _model(**compile_options):
    keras.utils.set_random_seed(3)
    # Two convolutions: XLA compiles them in a fraction of a U-Net's time.
    denoiser = conv_denoiser(width=4)
    model = DiffusionModel(denoiser, NoiseSchedule(100, "cosine"), seed=5)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), **compile_options)
    return model


@pytest.fixture
def measure_always(monkeypatch):
    """Every run counts as long enough to repay XLA's compilation."""
    monkeypatch.setattr(jit_choice, "XLA_GAIN_TO_REPAY", 1e9)


def test_a_short_run_keeps_graph_mode_without_compiling_xla(toy_images, capsys):
    model = _model()
    model.fit(toy_images, batch_size=16, epochs=2, verbose=2)
    lines = [s for s in capsys.readouterr().out.splitlines() if "jit_compile=" in s]
    # What is measured is said first; XLA is never compiled, nor announced.
    assert len(lines) == 2 and "timing the train step in graph mode" in lines[0]
    assert "graph mode" in lines[1] and "too few" in lines[1]
    assert model.jit_compile is False
    assert model.get_compile_config()["jit_choice"] is False


@pytest.fixture
def step_seconds(monkeypatch):
    """Each form's timed step lasts what the test sets: `step_seconds[jit_compile]`.

    The steps still run (two a timing), so that the state they change must
    be put back; only the clock is replaced.
    """
    seconds = {}
    timed = jit_choice._Form.time

    def time(form):
        timed(form)
        form.step = seconds[form.jit_compile]

    monkeypatch.setattr(jit_choice, "MIN_TIMED_SECONDS", 0.0)
    monkeypatch.setattr(jit_choice._Form, "time", time)
    return seconds


@pytest.mark.parametrize(
    "xla_seconds, kept, line",
    [
        # Twice as fast: XLA is kept.
        (0.5, True, "XLA: 500.0 ms a step with XLA, 1.0 s in graph mode (2.00x"),
        # Faster, but by less than XLA_MARGIN: graph mode.
        (0.99, False, "graph mode: 990.0 ms a step with XLA, 1.0 s in graph"),
        (2.0, False, "graph mode: 2.0 s a step with XLA, 1.0 s in graph"),
    ],
    ids=["xla wins", "xla within the margin", "graph wins"],
)
def test_the_faster_form_is_kept_and_the_run_is_as_if_compiled_with_it(
    toy_images, measure_always, step_seconds, capsys, xla_seconds, kept, line
):
    step_seconds.update({False: 1.0, True: xla_seconds})
    model = _model()
    history = model.fit(toy_images, batch_size=16, epochs=2, verbose=2, shuffle=False)
    lines = [s for s in capsys.readouterr().out.splitlines() if "jit_compile=" in s]
    assert len(lines) == 3 and line in lines[2], lines
    assert "compiling the step with XLA to compare (about" in lines[1], lines
    assert model.jit_compile is kept
    assert model.get_compile_config()["jit_choice"] is kept

    direct = _model(jit_compile=kept)
    expected = direct.fit(toy_images, batch_size=16, epochs=2, verbose=0, shuffle=False)
    # The timed steps trained on a batch; every variable they changed was put back.
    np.testing.assert_allclose(
        history.history["loss"], expected.history["loss"], rtol=1e-5
    )
    for a, b in zip(model.weights, direct.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_a_slow_step_is_timed_once_a_form_and_shows_progress_often(
    toy_images, measure_always, step_seconds, monkeypatch, capsys
):
    """A step of seconds (the tutorial's U-Net on a CPU): one timing a form,
    not alternated rounds, and few steps a call, so the bar moves every
    `MAX_CALL_SECONDS` or so."""
    step_seconds.update({False: 1.2, True: 0.8})
    monkeypatch.setattr(execution, "MAX_CALL_SECONDS", 2.5)
    timings = {False: 0, True: 0}
    timed = jit_choice._Form.time

    def counted(form):
        timings[form.jit_compile] += 1
        timed(form)

    monkeypatch.setattr(jit_choice._Form, "time", counted)
    model = _model()
    model.fit(toy_images, batch_size=16, epochs=1, verbose=2)
    # Graph mode once before deciding to compile XLA, then each form once.
    assert timings == {False: 2, True: 1}
    assert model.jit_compile is True
    # Calls of 2.5 s (MAX_CALL_SECONDS) at 1.2 s a step: 2 steps, not 4.
    assert model.steps_per_execution == 2
    assert model.trainer_state.step_seconds == 1.2
    out = capsys.readouterr().out
    assert "graph mode takes 1.2 s a step; compiling the step with XLA" in out


def test_verbose_0_measures_without_a_line(toy_images, capsys):
    model = _model()
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""
    assert model.get_compile_config()["jit_choice"] is False  # it measured


def test_the_choice_is_reused_by_a_second_fit_and_a_loaded_model(
    toy_images, tmp_path, monkeypatch
):
    model = _model()
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


def test_an_explicit_choice_is_never_measured(toy_images, monkeypatch):
    monkeypatch.setattr(jit_choice, "choose", None)  # would fail if called
    model = _model(jit_compile=True)
    assert model.jit_compile is True and "jit_choice" not in model.get_compile_config()
    model = _model(jit_compile=False)
    model.fit(toy_images, batch_size=16, epochs=1, verbose=0)
    assert model.jit_compile is False and "jit_choice" not in model.get_compile_config()


def test_a_step_xla_cannot_compile_is_measured_as_graph_mode(
    toy_images, measure_always, capsys
):
    model = DiffusionModel(conv_denoiser(host_op=True), NoiseSchedule(100, "cosine"))
    model.compile(optimizer="adam")
    with pytest.warns(UserWarning, match="XLA could not compile"):
        model.fit(toy_images, batch_size=16, epochs=1, verbose=1)
    assert "graph mode: XLA could not compile" in capsys.readouterr().out
    assert model.jit_compile is False


def test_measure_jit_compile_decides_once_for_the_run_it_is_told(
    toy_images, monkeypatch, capsys
):
    model = _model()
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
def test_bad_measure_arguments_are_refused(toy_images, kwargs, error):
    model = _model()
    name = next(iter(kwargs))
    with pytest.raises(error, match=f"{name}="):
        model.measure_jit_compile(toy_images, **kwargs)
    assert model.get_compile_config()["jit_choice"] is None  # nothing decided
