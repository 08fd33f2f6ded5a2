"""scripts/evaluate.py end to end on a tiny saved model, with pixel features."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule, UNet, evaluation, metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "evaluate.py")
FAST = ["--steps", "2", "--kid-subsets", "5", "--batch-size", "16"]


def load_evaluate():
    spec = importlib.util.spec_from_file_location("_script_evaluate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    unet = UNet((8, 8, 1), widths=(4, 8), num_res_blocks=1, groups=2, num_classes=3)
    model = DiffusionModel(unet, NoiseSchedule(20, "cosine"), seed=0)
    path = tmp_path_factory.mktemp("run") / "model.keras"
    model.save(str(path))
    return str(path)


def test_dataset_then_saved_statistics_give_the_same_scores(
    model_path, tmp_path, capsys
):
    script = load_evaluate()
    stats = str(tmp_path / "digits.npz")
    first_json = str(tmp_path / "first.json")
    args = [model_path, "--feature-extractor", "pixels", "--num-samples", "24"]
    code = script.main(
        [*args, *FAST, "--dataset", "digits", "--num-real", "40"]
        + ["--save-statistics", stats, "--output", first_json]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    first = json.load(open(first_json))
    assert f"fid: {first['fid']:.6g}" in out
    assert first["num_samples"] == 24 and first["num_real"] == 40
    assert first["features"] == "pixels" and first["reference"] == "digits"
    assert first["sampler"]["name"] == "ddim" and first["sampler"]["num_steps"] == 2
    assert np.isfinite(first["fid"]) and first["fid"] > 0
    assert np.isfinite(first["kid"]) and np.isfinite(first["kid_std"])
    with np.load(stats) as saved:
        assert saved["features"].shape == (40, 64)
        assert saved["mu"].shape == (64,) and saved["sigma"].shape == (64, 64)

    # Against the saved statistics: the same real set, so the same scores.
    code = script.main([*args, *FAST, "--statistics", stats])
    assert code == 0
    second = json.load(
        open(os.path.join(os.path.dirname(model_path), "evaluation.json"))
    )
    assert second["reference"] == stats and second["num_real"] == 40
    np.testing.assert_allclose(second["fid"], first["fid"], rtol=1e-6)
    np.testing.assert_allclose(second["kid"], first["kid"], rtol=1e-6)


def test_a_set_against_itself_scores_zero(model_path):
    """Known answer: the model's own samples as the real set give FID ~ 0."""
    from keras_diffusion.files import load_model
    from keras_diffusion.samplers import DDIMSampler

    model = load_model(model_path)
    sampler = DDIMSampler(num_steps=2)
    labels = np.arange(16) % 3
    own = model.generate(16, sampler=sampler, labels=labels, seed=0, verbose=0)
    scores = evaluation.evaluate_model(
        model,
        own,
        num_samples=16,
        sampler=sampler,
        feature_extractor="pixels",
        batch_size=16,
        kid_subsets=3,
    )
    assert scores["fid"] == pytest.approx(0.0, abs=1e-6)
    # The unbiased KID of a set against itself is not 0 (the cross term keeps
    # the matching pairs): it is what kernel_distance gives on the pixels.
    flat = own.reshape(16, -1)
    expected = metrics.kernel_distance(
        flat, flat, num_subsets=3, subset_size=16, seed=0
    )
    assert scores["kid"] == pytest.approx(expected[0], rel=1e-5)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--dataset", "digits", "--feature-extractor", "clip"], "feature_extractor"),
        (["--dataset", "imagenet"], "dataset='imagenet'"),
        (["--statistics", "/no/such.npz"], "/no/such.npz"),
        (["--dataset", "digits", "--num-samples", "1"], "num_samples=1"),
    ],
)
def test_bad_arguments_give_one_line_errors(model_path, capsys, args, fragment):
    code = load_evaluate().main([model_path, *args, *FAST])
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err


def test_missing_model_file_exits_non_zero_with_one_line(tmp_path):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT}
    result = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            str(tmp_path / "missing.keras"),
            "--dataset",
            "digits",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "missing.keras" in errors[0], result.stderr
