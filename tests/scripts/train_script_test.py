"""scripts/train.py: a real (tiny) run, its outputs, flags and bad input."""

import csv
import json
import os
import re

import keras
import numpy as np
import pytest
from PIL import Image

import keras_diffusion  # noqa: F401  (registers the classes load_model needs)


def training_module():
    """keras_diffusion.run.training, whose `train` scripts/train.py calls
    (imported after its flags are parsed)."""
    from keras_diffusion.run import training

    return training


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "Traceback" not in err[0]
    return err[0]


def test_help_documents_every_flag_with_its_default(train_script):
    parser = train_script.build_parser()
    text = parser.format_help()
    for action in parser._actions:
        if action.help in (None, "==SUPPRESS==") or not action.option_strings:
            continue
        if action.dest == "help":
            continue
        assert action.option_strings[-1] in text
        assert action.help, action.dest
    # ArgumentDefaultsHelpFormatter adds one "(default: ...)" a documented flag.
    documented = [a for a in parser._actions if a.help and a.dest != "help"]
    # --debug-nan-at-step and --write-flag-table are hidden.
    assert text.count("(default:") == len(documented) - 2
    for flag in ("--dataset", "--epochs", "--batch-size", "--output-dir"):
        assert flag in text
    assert "digits: 16,32,64" in text  # preset defaults are shown


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--epochs", "0"], "--epochs 0"),
        (["--dataset", "folder"], "--data-dir"),
        (["--dataset", "folder", "--data-dir", "{tmp}/missing"], "--data-dir must"),
        (["--dataset", "folder", "--data-dir", "{tmp}/empty"], "empty"),
        (["--data-dir", "{tmp}/empty"], "empty"),  # implies --dataset folder
        (["--dataset", "mnist", "--data-path", "{tmp}/none.npz"], "none.npz"),
        (["--dataset", "mnist", "--data-dir", "{tmp}/empty"], "--data-path"),
        (["--data-path", "{tmp}/x.npz"], "--data-path"),
        (["--dataset", "mnist", "--data-path", "{tmp}/empty"], "holds nothing"),
        (["--learning-rate", "-1"], "--learning-rate -1"),
        (["--widths", "8,16", "--attention-levels", "true"], "--attention-levels"),
        (["--class-conditional", "false", "--guidance-scale", "3"], "guidance"),
        (["--background", "black"], "background"),  # a folder's flag
        (["--model-size", "tiny", "--attention-levels", "true"], "--attention-levels"),
        (["--steps-per-execution", "0"], "--steps-per-execution 0"),
        (["--lora-rank", "0"], "--lora-rank 0"),
        (["--schedule", "flow", "--sampling-steps", "0"], "--sampling-steps 0"),
    ],
)
def test_bad_input_gives_one_line_and_writes_nothing(
    train_script, capsys, tmp_path, argv, match
):
    os.makedirs(tmp_path / "empty")
    out = tmp_path / "run"
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--output-dir", str(out)]
    assert train_script.main(argv) == 2
    line = _one_error_line(capsys)
    assert match in line
    # The flags typed, not the library's Python arguments.
    assert "Argument `" not in line and "(data_dir" not in line, line
    assert not out.exists()


def test_refusals_name_the_flags_typed_once(
    train_script, capsys, tmp_path, monkeypatch
):
    from keras_diffusion import ConsistencySchedule, DiffusionModel
    from keras_diffusion.run import init_from
    from tests.denoisers import tiny_unet

    # A few-step checkpoint, in memory: its file's loading is not tested here.
    model = DiffusionModel(tiny_unet(), ConsistencySchedule())
    monkeypatch.setattr(init_from, "load_model", lambda source: model)
    few, png = str(tmp_path / "few.keras"), str(tmp_path / "x.png")
    for path in (few, png):
        open(path, "wb").close()
    cases = [
        (["--init-from", png], "--init-from must be a .keras file, a run folder, "
         f"a diffusers folder or a Hub id (a Hub id reads owner/name). "
         f"Received: --init-from {png!r}"),
        (["--init-from", few, "--widths", "8,16,32"],
         "--widths sets an architecture"),
        (["--init-from", few, "--process", "vp"], "Pass --change-schedule to train"),
        (["--process", "flow", "--loss-weighting", "min_snr"], "--loss-weighting 'min"),
        (["--process", "consistency", "--consistency-training", "continuous",
          "--remat"], "--remat does not apply with --consistency-training 'cont"),
    ]  # fmt: skip
    out = tmp_path / "run"
    for argv, match in cases:
        assert train_script.main(argv + ["--output-dir", str(out)]) == 2
        line = _one_error_line(capsys)
        assert match in line, line
        # A flag in brackets is a hint the message gives nowhere else.
        for hint in re.findall(r"\((--[\w-]+)\)", line):
            assert line.count(hint) == 1, line
        assert "Argument" not in line and "True" not in line, line
        assert not out.exists()


def _bug_in_the_library(*args, **kwargs):
    # A TypeError Python raises on a line of the library's own code (its
    # first, the docstring: no `raise` there): a bug, not bad input.
    from keras_diffusion.run import training

    exec(compile("None + 1", training.__file__, "exec"), {})


@pytest.mark.parametrize(
    "failure, error",
    [
        (_bug_in_the_library, TypeError),
        (lambda *a, **k: keras.layers.Dense(-1), ValueError),
    ],
    ids=["library-bug", "keras-error"],
)
def test_an_error_that_is_not_about_input_keeps_its_traceback(
    train_script, capsys, tmp_path, monkeypatch, failure, error
):
    monkeypatch.setattr(training_module(), "train", failure)
    with pytest.raises(error):
        train_script.main(["--output-dir", str(tmp_path / "run")])
    assert "error:" not in capsys.readouterr().err


def test_is_user_error_tells_library_checks_from_other_errors():
    from keras_diffusion.run import cli
    from keras_diffusion.run.config import TrainConfig

    with pytest.raises(ValueError) as check:
        TrainConfig(epochs=0).resolve()
    assert cli.is_user_error(check.value)
    with pytest.raises(ValueError) as keras_check:
        keras.layers.Dense(-1)
    assert not cli.is_user_error(keras_check.value)
    with pytest.raises(TypeError) as bug:
        _bug_in_the_library()
    assert not cli.is_user_error(bug.value)
    assert not cli.is_user_error(ValueError("never raised: no traceback"))


def test_steps_per_execution_takes_an_int_or_auto(train_script, capsys):
    parser = train_script.build_parser()
    assert parser.parse_args(["--steps-per-execution", "auto"]).steps_per_execution == (
        "auto"
    )
    assert parser.parse_args(["--steps-per-execution", "4"]).steps_per_execution == 4
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--steps-per-execution", "fast"])
    assert exit_info.value.code == 2
    assert "expected an int or auto, got 'fast'" in capsys.readouterr().err


def test_a_missing_optional_package_stops_the_run_before_it_starts(
    train_script, capsys, tmp_path, monkeypatch
):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else find_spec(name, *a),
    )
    out = tmp_path / "run"
    assert train_script.main(["--tensorboard", "--output-dir", str(out)]) == 2
    assert "pip install tensorboard" in _one_error_line(capsys)
    assert not out.exists()


def test_a_dataset_that_needs_a_download_says_how_to_pass_a_file(
    train_script, capsys, tmp_path, monkeypatch
):
    def offline():
        raise Exception("URL fetch failure on https://...: None -- no network")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", offline)
    assert train_script.main(["--dataset", "mnist", "--output-dir", str(tmp_path)]) == 2
    line = _one_error_line(capsys)
    assert "no network" in line and "--data-path FILE.npz or FOLDER" in line


def test_empty_image_folder_with_unreadable_files(train_script, capsys, tmp_path):
    folder = tmp_path / "images"
    os.makedirs(folder)
    (folder / "a.png").write_bytes(b"not a png")
    argv = ["--dataset", "folder", "--data-dir", str(folder)]
    assert train_script.main(argv + ["--output-dir", str(tmp_path / "r")]) == 2
    line = _one_error_line(capsys)
    assert "no decodable image" in line and "1 .png (1 unreadable)" in line
    assert str(folder) in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--background", "pink", "argument --background: expected white, black"),
        ("--background", "1,2,300", "got '1,2,300'"),
        ("--channels", "2", "argument --channels: invalid choice: 2"),
        ("--resize", "fill", "argument --resize: invalid choice: 'fill'"),
        ("--model-size", "huge", "argument --model-size: invalid choice: 'huge'"),
    ],
)
def test_bad_folder_flags_name_the_flag_and_value(
    train_script, capsys, flag, value, expected
):
    with pytest.raises(SystemExit) as info:
        train_script.main(["--dataset", "folder", "--data-dir", ".", flag, value])
    assert info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.heavy
def test_tiny_run_writes_the_run_folder_and_refuses_to_redo_it(
    run, tiny, tmp_path, train_script, capsys
):
    out = tmp_path / "run"
    args = [*tiny, "--epochs", "2", "--output-dir", str(out)]
    # A process of its own: the script run as a user runs it, to exit 0. The
    # refusal and --overwrite below are its `main` in this process (the same
    # command, without two more TensorFlow start-ups).
    result = run("train", args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # No TensorFlow, absl or CUDA line (I0000 ..., cuInit, oneDNN): the run's
    # own output only.
    assert not re.search(r"^[IWEF]\d{4} |absl|cuInit", result.stderr, re.M), (
        result.stderr[-3000:]
    )
    assert sorted(os.listdir(out)) == [
        "config.json",
        "data.png",
        "log.csv",
        "model.keras",
        "samples.png",
    ]
    for name in ("model.keras", "samples.png", "config.json", "log.csv", "data.png"):
        assert str(out / name) in result.stdout  # says where each output went
    # One line on the data, before training, and a time estimate after a few steps.
    (data_line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("Data:")]
    assert "1,797 images" in data_line and "10 classes" in data_line
    assert "8x8x1" in data_line and "values in [-1.00, 1.00]" in data_line
    assert re.search(
        r"Time estimate: \d+ s an epoch .* for the final samples", result.stdout
    )
    with Image.open(out / "data.png") as grid:
        # 8 x 8 tiles of 8x8 pixels, 1 apart, upscaled 8x: 8 * (8 * 9 - 1).
        assert grid.mode == "L" and grid.size == (568, 568)
    # config.json by section: data, network, process, training, run.
    config = json.loads((out / "config.json").read_text())
    assert list(config) == ["data", "network", "process", "run", "training"]
    assert config["training"]["epochs"] == 2
    assert config["network"]["widths"] == [8]
    assert config["data"]["dataset"] == "digits"
    assert config["network"]["class_conditional"] is True
    assert config["process"]["name"] == "vp"
    with open(out / "log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1"]
    model = keras.saving.load_model(out / "model.keras")
    assert int(model.optimizer.iterations.numpy()) == 2 * 29  # 1797 / 64
    images = model.generate(2, labels=[3, 7], seed=0)
    assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()
    # The saved model samples as the run's grid did: its sampler, its steps.
    run_sampler = keras_diffusion.samplers.get(config["run"]["sampler"], num_steps=3)
    assert model.sampler.get_config() == run_sampler.get_config()
    np.testing.assert_array_equal(
        images, model.generate(2, labels=[3, 7], seed=0, sampler=run_sampler)
    )

    assert train_script.main(args) == 2
    line = _one_error_line(capsys)
    assert "finished run" in line and "--overwrite" in line
    # --overwrite replaces the finished run; one epoch, not two, shows it (the
    # folder now holds the one-epoch run) at half a run's training.
    one_epoch = [*tiny, "--epochs", "1", "--output-dir", str(out), "--overwrite"]
    assert train_script.main(one_epoch) == 0
    assert json.loads((out / "config.json").read_text())["training"]["epochs"] == 1
    with open(out / "log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]


def test_the_readme_and_the_script_give_the_first_run_the_same_time(train_script):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "README.md")) as f:
        readme = " ".join(f.read().split())
    said = re.search(r"train\.py +# digits, 16x16, (.+)$", train_script.__doc__, re.M)
    assert f"{said.group(1)} on two CPU cores)" in readme
