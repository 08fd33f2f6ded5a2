"""scripts/_startup.py: what the scripts do before TensorFlow loads.

A typo is answered in two lines (a process each: the point is what a new
process does): sample.py's and evaluate.py's before TensorFlow would load;
train.py's flags are made from the settings' declarations, so it imports
TensorFlow quietly first (and the `--import` modules, whose processes'
settings are flags), and answers without TensorFlow's start-up lines. A
Ctrl-C while TensorFlow loads is one line, and the flag values the scripts
accept are the library's. The quiet import itself: the tiny run of
train_script_test.py, whose stderr holds no TensorFlow line.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.scripts.conftest import SCRIPTS, script_env, start_script

sys.path.insert(0, SCRIPTS)
import _startup  # noqa: E402


def test_the_flag_choices_are_the_library_s():
    from keras_diffusion import samplers
    from keras_diffusion.data import decode
    from keras_diffusion.run import config

    # sample.py's and evaluate.py's, which parse before TensorFlow.
    library = {"resize": decode.RESIZE_MODES, "sampler": tuple(samplers.SAMPLERS)}
    assert {k: tuple(v) for k, v in library.items()} == _startup.CHOICES
    assert set(config.SAMPLERS) == set(samplers.SAMPLERS)
    assert _startup.BACKGROUNDS == tuple(decode.BACKGROUNDS)
    assert _startup.DEFAULT_BACKGROUND == decode.DEFAULT_BACKGROUND
    assert _startup.DEFAULT_RESIZE == decode.DEFAULT_RESIZE
    for text in ("white", "BLACK", "0,0,0", "255,255,255", "12,34,56"):
        assert _startup.background(text) == decode.background_name(text)


@pytest.mark.parametrize(
    "script, argv, expected",
    [
        ("train", ["--sampler", "ddmi"], "did you mean ddim?"),
        ("train", ["--process", "edn"], "did you mean edm?"),
        ("sample", ["m.keras", "--sampler", "eulr"], "did you mean euler?"),
        ("evaluate", ["m.keras", "--steps", "0"], "--steps: expected an int of at"),
    ],
)
def test_a_typo_is_answered_in_two_lines(tmp_path, script, argv, expected):
    env = script_env()
    if script != "train":  # train.py imports TensorFlow first
        # Answered before TensorFlow loads: one that fails to import is
        # never reached.
        fake = tmp_path / "no_tensorflow" / "tensorflow"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise ImportError('imported')\n")
        env["PYTHONPATH"] = str(fake.parent) + os.pathsep + env["PYTHONPATH"]
    result = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, f"{script}.py"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 2, result.stderr
    assert expected in lines[0] and "--help" in lines[1]


def test_ctrl_c_while_tensorflow_loads_is_one_line_and_status_130(tmp_path):
    process = start_script("train", ["--output-dir", str(tmp_path / "r")], tmp_path)
    time.sleep(1.0)  # in the import of TensorFlow, which takes seconds
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == _startup.EXIT_INTERRUPTED == 130
    assert stderr.splitlines() == ["Interrupted (Ctrl-C)."], stderr


def test_the_library_s_warnings_are_one_line(capsys):
    from keras_diffusion.data import folder_report

    def main():
        files = ["imgs/a.png", "imgs/b.png"]
        fit = {"image_size": (16, 16), "resize": "crop"}
        failed = [("imgs/a.png", "truncated")]
        folder_report.report("imgs", files, files, failed, [(16, 16)], fit, False)
        return 0

    assert _startup.run(main) == 0
    assert capsys.readouterr().err == (
        "warning: Skipped 1 of 2 image files under 'imgs' that could not be "
        "decoded: 'imgs/a.png' (truncated)\n"
    )
