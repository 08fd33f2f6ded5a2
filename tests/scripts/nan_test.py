"""A non-finite loss stops training with a clear message; checkpoints survive."""

import hashlib
import json

import keras
import numpy as np
import pytest

import keras_diffusion  # noqa: F401  (registers the classes load_model needs)
from keras_diffusion.run import backup_folder


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.heavy
def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(
    train_script, tiny, tmp_path, capsys
):
    # The script's `main` in this process: its exit status and its one line
    # on stderr are what the process would give (the process itself, its
    # start and its exit status, is tests/scripts/preempt_test.py's), without
    # two TensorFlow start-ups.
    out = tmp_path / "run"
    # Step 40 is the 11th step of epoch 2 (29 steps an epoch).
    args = [
        *tiny,
        "--epochs", "3",
        "--checkpoint-every", "1",
        "--output-dir", str(out),
        "--debug-nan-at-step", "40",
    ]  # fmt: skip
    assert train_script.main(args) == 3
    stderr = capsys.readouterr().err
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, lines
    message = lines[0]
    assert "loss became nan in epoch 2, step 11 (optimizer step 40)" in message
    assert "learning rate too high" in message and "loss scaling" in message

    # The epoch-1 checkpoint and backup are intact and finite.
    with open(out / "backup" / "training_metadata.json") as f:
        assert json.load(f)["epoch"] == 1
    model = keras.saving.load_model(out / "model.keras")
    assert int(model.optimizer.iterations.numpy()) == 29
    assert all(np.isfinite(np.asarray(w)).all() for w in model.weights)
    assert not (out / "samples.png").exists()
    newest = backup_folder.newest(out / "backup")
    backup = out / "backup" / newest.weights
    before = _digest(backup)

    # The run is unfinished: the same command resumes it (and diverges again
    # at the same step), never overwriting the good state.
    assert train_script.main(args) == 3
    assert "from epoch 2/3" in capsys.readouterr().out
    assert _digest(backup) == before
    assert backup_folder.newest(out / "backup") == newest
