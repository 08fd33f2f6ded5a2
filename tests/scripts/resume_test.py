"""Crash safety: SIGKILL a real training process mid-run, rerun, and finish.

Only the killed run is a process of its own (the kill is the process's); the
rerun is the script's `main` in this process: the same command, without a
second TensorFlow start-up. Batches of 256 make an epoch of the digits 8
steps (7 of 256, one of 5), and one level (--widths 8) a shorter trace, as in
tests/scripts/preempt_test.py."""

import json
import re
import signal

import keras
import numpy as np
import pytest

import keras_diffusion  # noqa: F401  (registers the classes load_model needs)

STEPS_PER_EPOCH = 8  # 1797 digits, batches of 256
EPOCHS = 4


# CI time: a kill without warning is covered by
# tests/run/fault_injection_test.py (killed around each commit, resumed equal).
@pytest.mark.slow
@pytest.mark.heavy
def test_sigkill_then_rerun_resumes_from_the_backed_up_epoch(
    start, wait, tiny, tmp_path, train_script, capsys
):
    out = tmp_path / "run"
    args = [
        *tiny, "--batch-size", "256",
        "--epochs", str(EPOCHS),
        "--checkpoint-every", "1",
        "--output-dir", str(out),
    ]  # fmt: skip
    process = start("train", args, cwd=tmp_path)
    try:
        wait(process, out, "epoch", 1)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL
    with open(out / "backup" / "training_metadata.json") as f:
        done = json.load(f)["epoch"]
    assert 1 <= done < EPOCHS
    # Whatever model.keras exists is complete: it loads.
    if (out / "model.keras").exists():
        keras.saving.load_model(out / "model.keras")

    capsys.readouterr()
    assert train_script.main(args) == 0
    stdout = capsys.readouterr().out
    match = re.search(
        r"Resuming the interrupted run in .* from epoch (\d+)/(\d+)", stdout
    )
    assert match, stdout[-2000:]
    assert (int(match.group(1)), int(match.group(2))) == (done + 1, EPOCHS)
    # Keras' progress bar starts at the resumed epoch, not at epoch 1.
    assert f"Epoch {done + 1}/{EPOCHS}" in stdout
    assert "Epoch 1/" not in stdout
    assert not (out / "backup").exists()  # finished runs keep no backup
    with open(out / "log.csv") as f:
        epochs = [line.split(",")[0] for line in f.read().split()[1:]]
    assert epochs == [str(e) for e in range(EPOCHS)]
    model = keras.saving.load_model(out / "model.keras")
    # Optimizer and EMA counters continued from the backup: every step counted once.
    steps = EPOCHS * STEPS_PER_EPOCH
    assert int(model.optimizer.iterations.numpy()) == steps
    assert int(model.ema.num_updates.numpy()) == steps
    assert np.isfinite(model.generate(2, labels=[0, 1], seed=0)).all()
