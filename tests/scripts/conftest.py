"""Helpers for the script tests: run scripts as subprocesses (in-process:
the `train_script` and `sample_script` fixtures of tests/conftest.py)."""

import json
import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")

# A model and run small enough for a test: seconds an epoch on two cores.
# The digits at their native 8x8 (the preset's 16x16 is upsampled from it),
# a one-level U-Net: a shorter trace of every step and sampling loop.
TINY = [
    "--image-size", "8",
    "--widths", "8",
    "--num-res-blocks", "1",
    "--num-samples", "10",
    "--sampling-steps", "3",
    "--jit-compile", "false",
]  # fmt: skip


def script_env():
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_script(name, args, cwd, **kwargs):
    """Starts `python scripts/<name>.py args` as a subprocess."""
    return subprocess.Popen(
        [sys.executable, os.path.join(SCRIPTS, f"{name}.py"), *args],
        cwd=cwd,
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def run_script(name, args, cwd, timeout=300):
    """Runs a script to the end; returns `CompletedProcess` (text output)."""
    return subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, f"{name}.py"), *args],
        cwd=cwd,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for_backup(process, output_dir, key, least, timeout=240):
    """Waits until the backup of the run in `output_dir` records `key`
    ("epoch" or "step") of at least `least`; fails when the process ends
    first or after `timeout` seconds."""
    metadata = os.path.join(output_dir, "backup", "training_metadata.json")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"training ended before its {key} {least} backup: "
                f"{process.stderr.read()}"
            )
        try:
            with open(metadata) as f:
                if json.load(f)[key] >= least:
                    return
        except (OSError, ValueError, KeyError):
            pass  # not written yet, or being written
        time.sleep(0.01)
    raise AssertionError(f"no {key} {least} backup in {timeout} s")


# The shared digits run: TINY, one epoch (29 updates), post-hoc EMA snapshots.
DIGITS_RUN = ["--epochs", "1", "--posthoc-ema", "--posthoc-snapshots", "4", *TINY]


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory):
    """One tiny trained digits run a session, `train.py DIGITS_RUN` in this
    process: its folder. Tests read it, or copy it to change it. Its users
    carry `pytest.mark.xdist_group("digits_run")`, so that the README's
    `pytest -n 2 --dist loadgroup` runs them on one worker and trains it
    once, not once a worker."""
    from tests.conftest import load_script

    folder = tmp_path_factory.mktemp("digits") / "run"
    argv = [*DIGITS_RUN, "--output-dir", str(folder)]
    assert load_script("train").main(argv) == 0
    return folder


@pytest.fixture
def tiny():
    return list(TINY)


@pytest.fixture
def run():
    return run_script


@pytest.fixture
def start():
    return start_script


@pytest.fixture
def wait():
    return wait_for_backup
