"""A resume equals the uninterrupted run off the default path too: with
`jit_compile="auto"` (its choice comes back from the backup; XLA kept, so
this is also the resume of an XLA run), with dropout, on latents (the
posterior moments of `keras_diffusion.latent.latent_dataset`), and with
LoRA (its base weights and factors come back apart), and with a ControlNet
(its control made of each image in the step)."""

import os
import signal

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, UNet, enable_controlnet, enable_lora
from keras_diffusion.adapters import lora
from keras_diffusion.data import from_arrays
from keras_diffusion.data.ordered import EpochOrder
from keras_diffusion.latent import latent_dataset
from keras_diffusion.run import backup_folder, preemption
from keras_diffusion.trainers import jit_choice
from tests.denoisers import conv_denoiser

EPOCHS = 2  # of 6 steps: 24 images, batches of 4


class _MomentsAutoencoder:
    """What a latent `DiffusionModel` asks of its autoencoder, on 4x4x2
    latents: a posterior sample from `[mean, logvar]` drawn from the step's
    seed, as `StableDiffusionAutoencoder.sample_latents` draws it."""

    latent_shape = (4, 4, 2)

    def sample_latents(self, moments, seed=None):
        mean, logvar = keras.ops.split(moments, 2, axis=-1)
        noise = tf.random.stateless_normal(tf.shape(mean), seed)
        return mean + keras.ops.exp(0.5 * logvar) * noise

    def decode(self, latents):
        return latents


def _model(jit_compile, dropout=0.0, latent=False, lora=False, control=False):
    keras.utils.set_random_seed(0)
    # Two Dropouts, each nested in a block of its own as a U-Net's ResBlocks
    # nest theirs (any depth: keras_internals.seed_generators), on a conv
    # denoiser: a fraction of a U-Net's trace, three times a test.
    if dropout:
        denoiser = conv_denoiser(convs=4, dropout=dropout)
    else:
        denoiser = conv_denoiser(image_shape=(4, 4, 2) if latent else (8, 8, 1))
    if control:  # a ControlNet copies a U-Net's blocks
        denoiser = UNet((8, 8, 1), widths=(8,), num_res_blocks=1, groups=4)
        # As if trained: a zero output convolution would pass no gradient.
        kernel = denoiser.get_layer("out_conv").kernel
        kernel.assign(np.random.default_rng(1).normal(0, 0.1, kernel.shape))
    autoencoder = _MomentsAutoencoder() if latent else None
    model = DiffusionModel(denoiser, seed=0, autoencoder=autoencoder)
    if lora:
        model = enable_lora(model, 2)
    if control:
        model = enable_controlnet(model, 1, extractor="silhouette")
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


def _train(
    backup_dir,
    jit_compile,
    signal_at=None,
    dropout=0.0,
    latent=False,
    lora=False,
    control=False,
):
    rng = np.random.default_rng(0)
    if latent:
        moments = np.concatenate(
            [rng.normal(size=(24, 4, 4, 2)), rng.uniform(-3, 0, (24, 4, 4, 2))], -1
        )
        data = latent_dataset(moments.astype(np.float32), batch_size=4, seed=5)
    else:
        images = rng.integers(0, 256, (24, 8, 8), np.uint8)
        data = from_arrays(images, batch_size=4, seed=5, flip=True)
    model = _model(jit_compile, dropout, latent, lora, control)
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


def _resumes_as_uninterrupted(tmp_path, signal_at, **kind):
    """Trains a run whole, another cut by a SIGTERM before step `signal_at`
    and then resumed, both of `kind` (`_model`'s options); asserts that the
    two end alike; `(whole, resumed, cut_at)`, where `cut_at` is the
    newest backup of the cut run when it stopped."""
    whole, _ = _train(tmp_path / "whole", False, **kind)
    _, stopped = _train(tmp_path / "cut", False, signal_at=signal_at, **kind)
    assert stopped
    cut_at = backup_folder.newest(tmp_path / "cut")
    resumed, _ = _train(tmp_path / "cut", False, **kind)
    assert _max_difference(whole, resumed) <= 1e-6
    return whole, resumed, cut_at


@pytest.fixture
def xla_wins(monkeypatch):
    """`jit_compile="auto"` tries XLA on any run and keeps it; counts the
    measurements."""
    monkeypatch.setattr(jit_choice, "XLA_COMPILE_FACTOR", 0.0)
    monkeypatch.setattr(jit_choice, "XLA_MARGIN", -100.0)
    # XLA wins whatever the clock says: each form is timed over two calls, once.
    monkeypatch.setattr(jit_choice, "MIN_TIMED_SECONDS", 0.0)
    monkeypatch.setattr(jit_choice, "TIMED_ROUNDS", 1)
    measured = []
    choose = jit_choice.choose

    def counting(*args, **kwargs):
        measured.append(1)
        return choose(*args, **kwargs)

    monkeypatch.setattr(jit_choice, "choose", counting)
    return measured


@pytest.mark.heavy
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
    _resumes_as_uninterrupted(tmp_path, 3, dropout=0.5)


def test_a_latent_run_resumes_mid_epoch_as_if_uninterrupted(tmp_path):
    # The moments are served in the epoch order: the resume skips the
    # batches trained on and draws the same posterior samples after them.
    _, resumed, cut_at = _resumes_as_uninterrupted(tmp_path, 9, latent=True)
    assert cut_at.step == 4  # sent before step 10, seen after it: epoch 2's 4th
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * 6


def test_a_lora_run_resumes_mid_epoch_as_if_uninterrupted(tmp_path):
    _, resumed, _ = _resumes_as_uninterrupted(tmp_path, 5, lora=True)
    start = _model(False, lora=True)  # the frozen weights of every run
    frozen = [not v.trainable for v in resumed.denoiser.weights]
    adapted = lora.adaptable_layers(resumed.denoiser)
    assert sum(frozen) == len(frozen) - 2 * len(adapted)  # 2 factors each
    pairs = zip(resumed.denoiser.weights, start.denoiser.weights, strict=True)
    for keep, (a, b) in zip(frozen, pairs, strict=True):
        if keep:
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_controlnet_run_resumes_mid_epoch_as_if_uninterrupted(tmp_path):
    whole, resumed, _ = _resumes_as_uninterrupted(tmp_path, 7, control=True)
    start = _model(False, control=True)  # the frozen U-Net of every run
    assert _max_difference(whole.controlnet, start.controlnet) > 0  # it trained
    for a, b in zip(resumed.denoiser.weights, start.denoiser.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_latent_batches_in_epoch_order_are_the_moments_unscaled():
    moments = np.random.default_rng(1).normal(0, 3, (10, 2, 2, 8)).astype(np.float32)
    data = latent_dataset(moments, batch_size=4, seed=2)
    order = EpochOrder(2)
    epoch = np.concatenate(list(data.epoch_batches(order).as_numpy_iterator()))
    # A permutation of the rows, values unchanged (no clip to [-1, 1]).
    assert epoch.shape == moments.shape and np.abs(epoch).max() > 1
    np.testing.assert_array_equal(
        np.sort(epoch.reshape(10, -1), 0), np.sort(moments.reshape(10, -1), 0)
    )
    rest = np.concatenate(list(data.epoch_batches(order, skip=1).as_numpy_iterator()))
    np.testing.assert_array_equal(rest, epoch[4:])
    order.epoch.assign(1)
    other = np.concatenate(list(data.epoch_batches(order).as_numpy_iterator()))
    assert not np.array_equal(other, epoch)


def test_data_of_unknown_length_resumes_from_an_epoch_end_as_if_uninterrupted(
    tmp_path,
):
    # No epoch order can be given to data Keras cannot count; its backups
    # count the steps seen, so a stop seen at an epoch's end resumes exactly.
    def unknown_length():
        images = np.random.default_rng(0).integers(0, 256, (24, 8, 8), np.uint8)
        data = from_arrays(images, batch_size=4, seed=5, flip=True)
        unknown = data.epoch_batches(EpochOrder(5)).filter(lambda batch: True)
        assert int(unknown.cardinality()) == tf.data.UNKNOWN_CARDINALITY
        return unknown

    def run(backup_dir, stop_after=None):
        model = _model(False)
        stop = preemption.StopRequest()

        class StopAfter(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch == stop_after:
                    stop.request("SIGTERM")

        backup = preemption.StepBackup(backup_dir, stop=stop)
        preemption.fit_resumable(
            model, unknown_length(), None, EPOCHS, backup, [], [StopAfter()], verbose=0
        )
        return model

    whole = run(tmp_path / "whole")
    with pytest.raises(preemption.Preempted, match="epoch 1, after step 6 "):
        run(tmp_path / "cut", stop_after=5)  # the last of epoch 1's 6 steps
    assert backup_folder.newest(tmp_path / "cut").epoch == 1
    resumed = run(tmp_path / "cut")
    assert _max_difference(whole, resumed) <= 1e-6
    # (Keras counts one more iteration an epoch of unknown length, 7 for 6
    # batches, in plain `fit` too: the same in both runs.)
    assert int(resumed.optimizer.iterations.numpy()) == int(
        whole.optimizer.iterations.numpy()
    )
