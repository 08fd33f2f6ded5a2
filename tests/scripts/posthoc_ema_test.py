"""scripts/train.py --posthoc-ema and scripts/posthoc_ema.py: one tiny digits
run, its EMA chosen after training."""

import csv
import warnings

import keras
import numpy as np
import pytest
from PIL import Image

import keras_diffusion as kd
from keras_diffusion.averages import posthoc as reconstruction
from keras_diffusion.evaluation import posthoc_sweep
from keras_diffusion.run import posthoc

# The session's digits run (tests/scripts/conftest.py), trained once.
pytestmark = pytest.mark.xdist_group("digits_run")


@pytest.fixture
def posthoc_run(digits_run):
    return digits_run


def _ema(model):
    return [np.asarray(v) for v in model.ema.values()]


def test_the_model_of_a_tracked_width_has_that_profile_as_its_ema(posthoc_run, capsys):
    from tests.conftest import load_script

    # 29 updates, a snapshot every 8 and at the end.
    steps = reconstruction.snapshot_steps(str(posthoc_run / "posthoc_ema"))
    assert steps == [8, 16, 24, 29]
    trained = keras.saving.load_model(posthoc_run / "model.keras")
    out = posthoc_run.parent / "chosen.keras"
    script = load_script("posthoc_ema")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        argv = [str(posthoc_run), "--sigma-rel", "0.1", "--out", str(out)]
        assert script.main(argv) == 0
    # A tracked width: exact, and no warning of a poor reconstruction.
    assert not [w for w in caught if "reconstructed with" in str(w.message)]
    printed = capsys.readouterr().out
    assert str(out) in printed and "the reconstruction's error: 0.000" in printed
    chosen = keras.saving.load_model(out)
    assert chosen.power_ema is None  # it samples and saves as any model
    for a, b in zip(_ema(chosen), trained.power_ema.values()[1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Another width is another EMA; the same call in Python gives it.
    other = kd.posthoc_ema(str(posthoc_run), 0.08)
    pairs = zip(_ema(other), _ema(chosen), strict=True)
    assert max(np.abs(a - b).max() for a, b in pairs) > 0
    images = other.generate(2, labels=[1, 2], seed=0, verbose=0)
    assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()


def test_a_width_the_snapshots_reconstruct_poorly_says_so(posthoc_run, capsys):
    from tests.conftest import load_script

    # 0.01 from profiles 0.05 and 0.1 on 4 snapshots: the error --sweep
    # prints, printed for one width too, and above 0.05 a warning.
    error = reconstruction.coefficients(str(posthoc_run / "posthoc_ema"), 0.01)[1]
    out = posthoc_run.parent / "narrow.keras"
    script = load_script("posthoc_ema")
    with pytest.warns(UserWarning, match=f"sigma_rel 0.01 .* error of {error:.2g} "):
        argv = [str(posthoc_run), "--sigma-rel", "0.01", "--out", str(out)]
        assert script.main(argv) == 0
    assert f"the reconstruction's error: {error:.3f}" in capsys.readouterr().out
    assert error > posthoc.LARGE_ERROR
    # An update before the first snapshot (8) is refused by name.
    with pytest.raises(ValueError, match=r"first snapshot's, 8, .* Received: at=3$"):
        kd.posthoc_ema(str(posthoc_run), 0.08, at=3)


def test_a_sweep_writes_its_curve_and_keeps_the_best(posthoc_run, capsys):
    from tests.conftest import load_script

    script = load_script("posthoc_ema")
    argv = [str(posthoc_run), "--sweep", "--sigma-rels", "0.03,0.2"]
    argv += ["--num-samples", "100"]
    assert script.main(argv) == 0
    output = capsys.readouterr().out
    assert "the run's own EMA (decay" in output and "best: sigma_rel" in output
    with open(posthoc_run / "posthoc_ema.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["sigma_rel"] for r in rows] == ["0.03", "0.2", "run_ema"]
    scores = [float(r["fd_ratio"]) for r in rows]
    assert all(np.isfinite(scores))
    best = rows[int(np.argmin(scores[:2]))]["sigma_rel"]
    with Image.open(posthoc_run / "posthoc_ema.png") as plot:
        assert plot.size == (640, 420)
    kept = keras.saving.load_model(posthoc_run / "posthoc_ema.keras")
    expected = kd.posthoc_ema(str(posthoc_run), float(best))
    for a, b in zip(_ema(kept), _ema(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_folder_judge_scores_against_held_out_images(posthoc_run, tmp_path):
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (16, 16), np.uint8)).save(
            tmp_path / f"{i}.png"
        )
    judge, description = posthoc_sweep.run_judge(
        {"dataset": "folder"}, judge_folder=str(tmp_path)
    )
    model = kd.posthoc_ema(str(posthoc_run), 0.1)
    score = judge(model)
    assert str(tmp_path) in description and score["num_samples"] == 6
    assert np.isfinite(score["fd_ratio"])
    with pytest.raises(ValueError, match="--judge-folder"):
        posthoc_sweep.run_judge({"dataset": "mnist"})


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["{run}/model.keras", "--sigma-rel", "0.1"], "is a file; post-hoc EMA needs"),
        (["{run}-typo", "--sigma-rel", "0.1"], "-typo': no such folder"),
        (["{run}", "--sigma-rel", "0.3"], "--sigma-rel must be below 0.28"),
        (["{run}", "--sigma-rel", "0.1", "--out", "m.h5"], "--out must end in"),
        (["{plain}", "--sigma-rel", "0.1"], "train it with --posthoc-ema"),
        (
            ["{run}", "--sweep", "--sigma-rels", "0.05,0.5"],
            "--sigma-rels must be a list of relative widths in (0, 0.28), e.g. "
            "[0.05, 0.1]. Received: --sigma-rels [0.05, 0.5]",
        ),
    ],
)
def test_bad_input_is_one_line_naming_what_was_typed(
    posthoc_run, tmp_path, capsys, argv, fragment
):
    from tests.conftest import load_script

    (tmp_path / "model.keras").write_bytes(b"")
    names = {"run": str(posthoc_run), "plain": str(tmp_path)}
    script = load_script("posthoc_ema")
    assert script.main([a.format(**names) for a in argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and fragment in error and error.count("\n") == 1


# Heavy: the group of the digits run is handed out among the first.
@pytest.mark.heavy
def test_a_lora_fine_tune_of_the_run_keeps_its_weights_and_chooses_its_ema(
    posthoc_run, capsys
):
    from tests.conftest import load_script

    folder = posthoc_run.parent / "lora"
    argv = ["--init-from", str(posthoc_run), "--lora-rank", "2", "--epochs", "1"]
    argv += ["--posthoc-ema", "--posthoc-snapshots", "1", "--num-samples", "2"]
    argv += ["--sampling-steps", "1", "--jit-compile", "false", "--grad-accum", "2"]
    argv += ["--image-size", "8"]  # the run's
    assert load_script("train").main([*argv, "--output-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "of them trainable (--lora-rank 2)" in out
    assert "a weight update every 2 (--grad-accum 2)" in out
    tuned = keras.saving.load_model(folder / "model.keras")
    assert tuned.lora["rank"] == 2
    # The frozen weights are the checkpoint's EMA, bit for bit.
    source = keras.saving.load_model(posthoc_run / "model.keras")
    base = [v for v in tuned.denoiser.weights if not v.trainable]
    for a, b in zip(base, source.ema.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), np.asarray(b))
    # The profiles averaged the factors; a chosen width keeps the adapter.
    chosen = kd.posthoc_ema(str(folder), 0.1)
    assert chosen.lora == tuned.lora
    for a, b in zip(_ema(chosen), tuned.power_ema.values()[1], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
