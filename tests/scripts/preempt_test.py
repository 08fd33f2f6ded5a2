"""A real SIGTERM to scripts/train.py mid-epoch: exit status 75, then the
same command resumes and ends where an uninterrupted run ends.

The only end-to-end cover of the signal path, so it runs in the default
suite (and CI). Batches of 256 make an epoch of the digits 8 steps (7 of
256, one of 5), not 29: each run backs up every step, and the backups, not
the training, were most of its time."""

import signal

import keras
import numpy as np

import keras_diffusion  # noqa: F401  (registers the classes load_model needs)


def test_sigterm_mid_epoch_then_rerun_equals_an_uninterrupted_run(
    start, run, wait, tiny, tmp_path
):
    def args(out):
        return [
            *tiny, "--epochs", "2", "--batch-size", "256", "--seed", "4",
            "--backup-every-steps", "1", "--output-dir", str(out),
        ]  # fmt: skip

    process = start("train", args(tmp_path / "cut"), cwd=tmp_path)
    try:
        wait(process, tmp_path / "cut", "step", 3)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=240)
    finally:
        process.kill()
    assert process.returncode == 75, stderr[-3000:]
    assert "Stopped by SIGTERM in epoch 1, after step" in stderr
    resumed = run("train", args(tmp_path / "cut"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming the interrupted run" in resumed.stdout
    whole = run("train", args(tmp_path / "whole"), cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    models = [
        keras.saving.load_model(tmp_path / name / "model.keras")
        for name in ("cut", "whole")
    ]
    for a, b in zip(*(m.get_weights() for m in models), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    logs = [
        np.loadtxt(tmp_path / n / "log.csv", delimiter=",", skiprows=1, usecols=(0, 1))
        for n in ("cut", "whole")
    ]
    np.testing.assert_allclose(logs[0], logs[1], atol=1e-6)
