"""A process the library does not ship (tests/schedules/ve_process.py, with
settings of its own names): it trains with `fit`, samples with the samplers
that step on its family, saves and loads as `.keras`, resumes mid-epoch,
resolves in a `TrainConfig`, and through `scripts/train.py --import` gets
its flags, its config.json section and its resume, with no library file
edited (docs/architecture.md, "Adding a process").
"""

import json
import os
import re

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel, samplers
from keras_diffusion.data import from_arrays
from keras_diffusion.run import config
from tests.conftest import load_script
from tests.denoisers import conv_denoiser
from tests.run import preemption_test
from tests.schedules.ve_process import VESchedule
from tests.scripts.conftest import TINY

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ve_process.py")


def _model():
    keras.utils.set_random_seed(0)
    model = DiffusionModel(conv_denoiser(), VESchedule(), seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    return model


def test_it_trains_samples_and_round_trips(tmp_path):
    model = _model()
    images = np.random.default_rng(0).integers(0, 256, (40, 8, 8), np.uint8)
    model.fit(from_arrays(images, batch_size=4, seed=5), epochs=1, verbose=0)
    assert np.isfinite(model.loss_tracker.result().numpy())
    # Its own default sampler (the class's table), and each sampler of the
    # "sigma" family; DDIM steps on alphas_cumprod and is refused by name.
    np.testing.assert_array_equal(
        model.generate(2, seed=0, verbose=0),
        model.generate(2, sampler=samplers.EulerSampler(8), seed=0, verbose=0),
    )
    for sampler in (samplers.EulerSampler(4), samplers.HeunSampler(3)):
        images = model.generate(2, sampler=sampler, seed=1, verbose=0)
        assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()
    with pytest.raises(ValueError, match="the samplers that do: dpm\\|euler\\|heun"):
        model.generate(1, sampler="ddim")
    dpm = samplers.DPMSolverSampler(4)
    want = model.generate(2, sampler=dpm, seed=3, verbose=0)
    path = str(tmp_path / "ve.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.schedule, VESchedule)
    got = loaded.generate(2, sampler=dpm, seed=3, verbose=0)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_it_resumes_mid_epoch_as_the_uninterrupted_run(tmp_path):
    # tests/run/preemption_test.py's run (a SIGTERM during a compiled call of
    # 4 steps, a resume from the step backup) on this process.
    assert preemption_test.resumed_difference(tmp_path, VESchedule()) <= 1e-6


def test_a_run_config_selects_it_by_name_with_its_own_settings():
    resolved = config.TrainConfig(process="ve", noise_ceiling=10.0).resolve()
    assert (resolved.process, resolved.schedule) == ("ve", "ve")
    assert (resolved.noise_floor, resolved.noise_ceiling) == (0.02, 10.0)
    assert (resolved.sampler, resolved.sampling_steps) == ("euler", 8)
    assert resolved.prediction_type is None and resolved.beta_schedule is None
    assert resolved.sections()["process"] == {
        "name": "ve",
        "noise_floor": 0.02,
        "noise_ceiling": 10.0,
    }
    with pytest.raises(ValueError, match=r"\('ddim'\).*'ve'.*dpm\|euler\|heun"):
        config.TrainConfig(process="ve", sampler="ddim").resolve()
    # Its settings are its own: EDM's are refused, and its own on EDM.
    with pytest.raises(ValueError, match=r"--sigma-min\) applies with process 'edm'"):
        config.TrainConfig(process="ve", sigma_min=0.1).resolve()
    with pytest.raises(ValueError, match=r"--noise-floor\) applies with process 've'"):
        config.TrainConfig(process="edm", noise_floor=0.1).resolve()


# Last in this file: the script imports the module by its path, which
# registers its class again under the same names.
def test_the_script_gives_it_flags_a_config_section_and_a_resume(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "run"
    argv = [
        "--import", MODULE, "--process", "ve", "--noise-ceiling", "10",
        *TINY, "--epochs", "1", "--batch-size", "256",
        "--output-dir", str(out),
    ]  # fmt: skip
    # Preempted: the script's test hook sends SIGTERM after 2 steps (in
    # this process, as tests/run/preemption_test.py does).
    script = load_script("train")
    monkeypatch.setattr(script, "_nan_at_step", preemption_test._SignalAt)
    assert script.main([*argv, "--debug-nan-at-step", "2"]) == 75
    saved = json.loads((out / "config.json").read_text())
    own = {"name": "ve", "noise_floor": 0.02, "noise_ceiling": 10.0}
    assert saved["process"] == own
    # The same command continues the preempted run.
    assert load_script("train").main(argv) == 0
    assert "Resuming the interrupted run" in capsys.readouterr().out
    assert keras.saving.load_model(out / "model.keras").schedule.sigma_max == 10.0
    with pytest.raises(SystemExit):
        load_script("train").main(["--import", MODULE, "--help"])
    text = capsys.readouterr().out
    assert re.search(r"process: ve:\n  --noise-floor NOISE_FLOOR\n", text), text
    assert "the largest noise level, where sampling starts" in text
