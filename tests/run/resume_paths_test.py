"""A resume equals the uninterrupted run off the default path too: with
`jit_compile="auto"` (its choice comes back from the backup; XLA kept, so
this is also the resume of an XLA run) and with dropout."""

import os
import signal

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel
from keras_diffusion.data import from_arrays
from keras_diffusion.data.ordered import EpochOrder
from keras_diffusion.models import jit_choice
from keras_diffusion.run import backup_folder, preemption
from tests.denoisers import conv_denoiser, tiny_unet

EPOCHS = 2  # of 6 steps: 24 images, batches of 4


def _model(jit_compile, dropout=0.0):
    keras.utils.set_random_seed(0)
    # One level of the U-Net: five ResBlocks' Dropouts, nested as in any
    # U-Net, at a quarter of the two levels' parameters and a shorter trace.
    denoiser = tiny_unet(widths=(4,), dropout=dropout) if dropout else conv_denoiser()
    model = DiffusionModel(denoiser, seed=0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        jit_compile=jit_compile,
        steps_per_execution=1,
    )
    return model


class _SignalAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_begin(self, batch, logs=None):
        if (
            int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            >= self.step
        ):
            self.step = float("inf")
            os.kill(os.getpid(), signal.SIGTERM)


def _train(backup_dir, jit_compile, signal_at=None, dropout=0.0):
    images = np.random.default_rng(0).integers(0, 256, (24, 8, 8), np.uint8)
    data = from_arrays(images, batch_size=4, seed=5, flip=True)
    model = _model(jit_compile, dropout)
    callbacks = [_SignalAt(signal_at)] if signal_at else []
    with preemption.stop_on_signals(log=lambda message: None) as stop:
        backup = preemption.StepBackup(backup_dir, stop=stop)
        try:
            preemption.fit_resumable(
                model, data, EpochOrder(5), EPOCHS, backup, callbacks, verbose=0
            )
        except preemption.Preempted:
            return model, True
    return model, False


def _max_difference(a, b):
    return max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(a.get_weights(), b.get_weights(), strict=True)
    )


@pytest.fixture
def xla_wins(monkeypatch):
    """`jit_compile="auto"` tries XLA on any run and keeps it; counts the
    measurements."""
    monkeypatch.setattr(jit_choice, "XLA_COMPILE_FACTOR", 0.0)
    monkeypatch.setattr(jit_choice, "XLA_MARGIN", -100.0)
    measured = []
    choose = jit_choice.choose

    def counting(*args, **kwargs):
        measured.append(1)
        return choose(*args, **kwargs)

    monkeypatch.setattr(jit_choice, "choose", counting)
    return measured


@pytest.mark.xla
def test_auto_resumes_with_the_choice_of_the_run_it_continues(tmp_path, xla_wins):
    whole, _ = _train(tmp_path / "whole", "auto")
    assert whole.jit_choice is True and len(xla_wins) == 1
    _, stopped = _train(tmp_path / "cut", "auto", signal_at=8)  # epoch 2, step 2
    assert stopped and backup_folder.newest(tmp_path / "cut").jit_choice is True
    # Measured again on the steps left, the choice could differ (a short rest
    # keeps graph mode), and so would the numerics: it is not measured.
    del xla_wins[:]
    resumed, stopped = _train(tmp_path / "cut", "auto")
    assert not stopped and xla_wins == []  # not measured again
    assert resumed.jit_choice is True and resumed.jit_compile is True
    assert _max_difference(whole, resumed) <= 1e-6
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * 6


def test_a_model_with_dropout_resumes_as_if_uninterrupted(tmp_path):
    # The Dropout layers draw from seed generators of their own: their state
    # must come back with the backup, or the resumed steps drop other units.
    whole, _ = _train(tmp_path / "whole", False, dropout=0.5)
    _, stopped = _train(tmp_path / "cut", False, signal_at=3, dropout=0.5)
    assert stopped
    resumed, _ = _train(tmp_path / "cut", False, dropout=0.5)
    assert _max_difference(whole, resumed) <= 1e-6
