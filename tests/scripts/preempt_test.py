"""A real SIGTERM to scripts/train.py mid-epoch: exit status 75, then the
same command resumes and ends where an uninterrupted run ends.

The only end-to-end cover of the signal path, so it runs in the default
suite (and CI). Batches of 256 make an epoch of the digits 8 steps (7 of
256, one of 5), not 29: the interrupted run backs up every step, and the
backups, not the training, were most of its time. Only the interrupted run
is a process of its own (the signal, its handler and the exit status are the
process's); the resume and the uninterrupted run are the script's `main` in
this process: the same command, without two more TensorFlow start-ups."""

import re
import signal

import keras
import numpy as np
import pytest

import keras_diffusion  # noqa: F401  (registers the classes load_model needs)


@pytest.mark.heavy
def test_sigterm_mid_epoch_then_rerun_equals_an_uninterrupted_run(
    start, wait, tiny, tmp_path, train_script, capsys
):
    def args(out, *backups):
        return [
            *tiny, "--epochs", "2", "--batch-size", "256",
            "--seed", "4", *backups, "--output-dir", str(out),
        ]  # fmt: skip

    cut = args(tmp_path / "cut", "--backup-every-steps", "1")
    process = start("train", cut, cwd=tmp_path)
    try:
        wait(process, tmp_path / "cut", "step", 3)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=240)
    finally:
        process.kill()
    assert process.returncode == 75, stderr[-3000:]
    assert "Stopped by SIGTERM in epoch 1, after step" in stderr
    assert train_script.main(cut) == 0
    out = capsys.readouterr().out
    assert "Resuming the interrupted run" in out
    # The rest of epoch 1 is a fit of its own: still numbered of the run's 2.
    assert re.findall(r"Epoch \d+/\d+", out) == ["Epoch 1/2", "Epoch 2/2"]
    # Uninterrupted, and without step backups: they write the state, they do
    # not change the training (16 backups fewer).
    assert train_script.main(args(tmp_path / "whole")) == 0
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
