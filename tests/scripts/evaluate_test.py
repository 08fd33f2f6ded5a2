"""scripts/evaluate.py end to end on a tiny saved model, with pixel features."""

import json
import os
import time

import numpy as np
import pytest

from keras_diffusion import DiffusionModel, NoiseSchedule, metrics
from keras_diffusion.evaluation import evaluate as evaluation
from tests import shape_folders
from tests.denoisers import tiny_unet

FAST = ["--steps", "2", "--kid-subsets", "5", "--batch-size", "16"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    unet = tiny_unet(num_classes=3)
    model = DiffusionModel(unet, NoiseSchedule(20, "cosine"), seed=0)
    path = tmp_path_factory.mktemp("run") / "model.keras"
    model.save(str(path))
    return str(path)


def test_dataset_then_saved_statistics_give_the_same_scores(
    evaluate_script, model_path, tmp_path, capsys
):
    stats = str(tmp_path / "digits.npz")
    first_json = str(tmp_path / "first.json")
    args = [model_path, "--feature-extractor", "pixels", "--num-samples", "24"]
    code = evaluate_script.main(
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
    code = evaluate_script.main([*args, *FAST, "--statistics", stats])
    assert code == 0
    second = json.load(
        open(os.path.join(os.path.dirname(model_path), "evaluation.json"))
    )
    assert second["reference"] == stats and second["num_real"] == 40
    np.testing.assert_allclose(second["fid"], first["fid"], rtol=1e-6)
    np.testing.assert_allclose(second["kid"], first["kid"], rtol=1e-6)


def test_a_set_against_itself_scores_zero(model_path):
    """Known answer: the model's own samples as the real set give FID ~ 0."""
    from keras_diffusion.samplers import DDIMSampler
    from keras_diffusion.utils.files import load_model

    model = load_model(model_path)
    sampler = DDIMSampler(num_steps=2)
    labels = np.arange(16) % 3
    own = model.generate(16, sampler=sampler, labels=labels, seed=0, verbose=0)
    before = time.perf_counter()
    # The default subset size (1000) would take the whole set: it is halved.
    with pytest.warns(UserWarning, match="subsets of 8 used instead"):
        scores = evaluation.evaluate_model(
            model,
            own,
            num_samples=16,
            sampler=sampler,
            feature_extractor="pixels",
            batch_size=16,
            kid_subsets=3,
        )
    elapsed = time.perf_counter() - before
    assert scores["fid"] == pytest.approx(0.0, abs=1e-6)
    # The report's seconds are spent within the call (rounded to 1 ms).
    assert 0.0 <= scores["seconds"] <= elapsed + 1e-3
    # The unbiased KID of a set against itself is not 0 (the cross term keeps
    # the matching pairs): it is what kernel_distance gives on the pixels.
    flat = own.reshape(16, -1)
    expected = metrics.kernel_distance(flat, flat, num_subsets=3, subset_size=8, seed=0)
    assert scores["kid"] == pytest.approx(expected[0], rel=1e-5)
    assert scores["kid_std"] == pytest.approx(expected[1], rel=1e-5)
    assert scores["kid_std"] > 1e-6 and scores["kid_subset_size"] == 8


def test_the_feature_names_keep_their_import_paths():
    # `feature_sets` holds them; evaluation and evaluation.evaluate still
    # give them, as before it did.
    from keras_diffusion import evaluation as package
    from keras_diffusion.evaluation import feature_sets

    for name in ("FEATURE_EXTRACTORS", "build_feature_extractor", "real_image_batches"):
        assert getattr(evaluation, name) is getattr(feature_sets, name), name
        assert getattr(package, name) is getattr(feature_sets, name), name


def test_evaluate_saved_model_takes_evaluate_models_options_and_no_others(tmp_path):
    # Each is evaluate_model's, passed on; a typo is refused before the
    # model loads (there is none here), naming it.
    assert evaluation.SCORING_OPTIONS == {
        "num_samples",
        "num_real",
        "feature_extractor",
        "weights",
        "kid_subsets",
        "kid_subset_size",
        "save_statistics",
    }
    missing = str(tmp_path / "no_such.keras")
    with pytest.raises(TypeError, match=r"\['num_sample'\]"):
        evaluation.evaluate_saved_model(missing, dataset="digits", num_sample=8)
    with pytest.raises(TypeError):  # options after `output` go by name
        evaluation.evaluate_saved_model(missing, "digits", None, None, None, 8)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--dataset", "digits", "--feature-extractor", "clip"], "--feature-extractor"),
        (["--dataset", "imagenet"], "--dataset 'imagenet'"),
        (["--statistics", "/no/such.npz"], "/no/such.npz"),
        (["--dataset", "digits", "--num-samples", "1"], "--num-samples 1"),
    ],
)
def test_bad_arguments_give_one_line_errors(
    evaluate_script, model_path, capsys, args, fragment
):
    code = evaluate_script.main([model_path, *args, *FAST])
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err


def test_the_inception_download_hint_names_the_flag(
    evaluate_script, model_path, capsys, monkeypatch
):
    import keras

    def offline(*args, **kwargs):
        raise Exception("URL fetch failure: no network")

    monkeypatch.setattr(keras.applications, "InceptionV3", offline)
    args = [model_path, "--dataset", "digits", *FAST]
    assert evaluate_script.main(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "pass `--weights '/path/to/that.h5'`" in line
    assert "--feature-extractor 'inception_v3'" in line and "weights=" not in line


def test_missing_model_file_exits_non_zero_with_one_line(
    evaluate_script, tmp_path, capsys
):
    # The script's `main` in this process, as the tests above: its exit status
    # is what `main` returns, and an exception would show here as a traceback.
    missing = str(tmp_path / "missing.keras")
    code = evaluate_script.main([missing, "--dataset", "digits"])
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "missing.keras" in err


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """A tiny untrained 16x16 RGB model and a held-out folder of 40 shapes."""
    root = tmp_path_factory.mktemp("judge")
    folder = shape_folders.write_shapes(root / "heldout", 40, seed=0)
    model = DiffusionModel(tiny_unet((16, 16, 3)), NoiseSchedule(20, "cosine"), seed=0)
    path = root / "run" / "model.keras"
    path.parent.mkdir()
    model.save(str(path))
    return str(path), str(folder)


def test_judge_folder_prints_fd_floor_and_ratio(evaluate_script, judged, capsys):
    model, folder = judged
    code = evaluate_script.main([model, "--judge-folder", folder, "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.load(open(os.path.join(os.path.dirname(model), "quality.json")))
    for key in ("fd", "floor", "fd_ratio"):
        assert f"{key}: {report[key]:.6g}" in out
    assert report["num_samples"] == 20  # half the folder
    assert report["background"] == "white" and report["resize"] == "crop"
    assert report["sampler"]["num_steps"] == 2
    # An untrained model's samples are far from the shapes.
    assert report["fd_ratio"] > 3
    np.testing.assert_allclose(report["fd"] / report["floor"], report["fd_ratio"])


def test_a_run_folder_gets_its_report_inside_and_progress_is_shown(
    evaluate_script, judged, capsys
):
    """Given the run folder, the report goes in it (beside it, two runs'
    reports would overwrite each other), and the generation shows progress."""
    model, folder = judged
    run = os.path.dirname(model)
    code = evaluate_script.main([run, "--judge-folder", folder, "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.splitlines()[-1].endswith(os.path.join(run, "quality.json"))
    assert os.path.isfile(os.path.join(run, "quality.json"))
    assert not os.path.exists(os.path.join(os.path.dirname(run), "quality.json"))
    assert "Generating 20 images" in out


def test_judge_folder_decodes_as_the_run_did(evaluate_script, judged, tmp_path, capsys):
    """The run's config.json by the model gives the background and resize."""
    model, folder = judged
    config = os.path.join(os.path.dirname(model), "config.json")
    with open(config, "w") as f:
        json.dump({"dataset": "folder", "background": "black", "resize": "pad"}, f)
    try:
        args = [model, "--judge-folder", folder, "--steps", "2", "--num-samples"]
        output = str(tmp_path / "q.json")
        code = evaluate_script.main([*args, "10", "--output", output])
        assert code == 0, capsys.readouterr().err
        first = json.load(open(output))
        assert first["background"] == "black" and first["resize"] == "pad"
        assert first["num_samples"] == 10
        # A flag overrides the run's; white and black differ under transparency.
        code = evaluate_script.main(
            [*args, "10", "--output", output, "--background", "white"]
        )
        assert code == 0
        second = json.load(open(output))
        assert second["background"] == "white" and second["resize"] == "pad"
        assert second["floor"] != first["floor"]
    finally:
        os.remove(config)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--judge-folder", "/no/such/dir"], "/no/such/dir"),
        (["--num-samples", "21"], "--num-samples 21"),
        (["--native-size", "3"], "--native-size 3"),
        (["--save-statistics", "s.npz"], "--save-statistics is for FID/KID"),
    ],
)
def test_judge_folder_bad_arguments_give_one_line_errors(
    evaluate_script, judged, capsys, args, fragment
):
    model, folder = judged
    if "--judge-folder" not in args:
        args = ["--judge-folder", folder, *args]
    code = evaluate_script.main([model, *args, "--steps", "2"])
    err = capsys.readouterr().err
    assert code != 0
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err


def test_judge_flags_without_judge_folder_are_refused(
    evaluate_script, model_path, capsys
):
    args = [model_path, "--dataset", "digits", "--resize", "pad", *FAST]
    assert evaluate_script.main(args) == 2
    err = capsys.readouterr().err
    assert err == "error: --resize is for --judge-folder only\n"


def test_a_flow_run_is_judged_with_its_own_sampler_and_guidance(
    evaluate_script, judged, tmp_path, capsys
):
    """Without --sampler and --guidance-scale, the model's own sampler (a flow
    model's: DPM-Solver++, where DDIM does not apply) and its run's guidance."""
    from keras_diffusion import FlowMatchSchedule

    _, folder = judged
    run = tmp_path / "flow"
    run.mkdir()
    unet = tiny_unet((16, 16, 3), num_classes=2)
    DiffusionModel(unet, FlowMatchSchedule(), seed=0).save(str(run / "model.keras"))
    (run / "config.json").write_text(json.dumps({"guidance_scale": 2.0}))
    code = evaluate_script.main([str(run), "--judge-folder", folder, "--steps", "2"])
    assert code == 0, capsys.readouterr()
    report = json.load(open(run / "quality.json"))
    assert report["sampler"]["name"] == "dpm" and report["sampler"]["num_steps"] == 2
    assert report["guidance_scale"] == 2.0
