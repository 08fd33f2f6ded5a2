"""Tests of keras_diffusion.callbacks."""

import math
import os

import keras
import numpy as np
import pytest
from PIL import Image

from keras_diffusion import DDIMSampler, DiffusionModel, callbacks
from tests.denoisers import conv_denoiser


def _model():
    # A conv denoiser in graph mode: the callbacks see only the model's
    # `fit`, `generate` and files, whatever its denoiser, and it traces in a
    # fraction of a U-Net's time (XLA, the default, has its own tests).
    model = DiffusionModel(conv_denoiser(), ema_decay=0.9, seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    return model


def _png(path):
    with Image.open(path) as image:
        return np.asarray(image)


def test_sample_grid_writes_every_n_epochs_from_a_fixed_seed(tmp_path, toy_images):
    model = _model()
    grid = callbacks.SampleGrid(
        str(tmp_path / "grid_{epoch}.png"),
        num_images=4,
        every=2,
        sampler=DDIMSampler(num_steps=2),
    )
    model.fit(toy_images, epochs=4, batch_size=32, verbose=0, callbacks=[grid])
    assert sorted(os.listdir(tmp_path)) == ["grid_2.png", "grid_4.png"]
    # 2x2 tiles of 8 pixels, 1 pixel apart, upscaled x8.
    assert _png(tmp_path / "grid_4.png").shape == (17 * 8, 17 * 8)
    grid.set_model(model)
    again = grid.write(4, filepath=str(tmp_path / "again.png"))
    np.testing.assert_array_equal(_png(again), _png(tmp_path / "grid_4.png"))


def test_sample_grid_gives_a_conditional_model_one_row_per_class(tmp_path):
    model = DiffusionModel(conv_denoiser(num_classes=3), num_classes=3, seed=0)
    grid = callbacks.SampleGrid(
        str(tmp_path / "g.png"), num_images=6, sampler=DDIMSampler(num_steps=2)
    )
    grid.set_model(model)
    grid.write()
    assert _png(tmp_path / "g.png").shape == (26 * 8, 17 * 8)  # 3 rows, 2 columns

    # 8 images of 3 classes: all 8 written, 3, 3 and 2 of each, a square grid.
    grid = callbacks.SampleGrid(
        str(tmp_path / "h.png"), num_images=8, sampler=DDIMSampler(num_steps=2)
    )
    grid.set_model(model)
    assert grid._labels_and_rows() == ([0, 0, 0, 1, 1, 1, 2, 2], None)


def test_class_rows_balance_any_count():
    from keras_diffusion.utils.images import class_rows

    assert class_rows(3, 6) == ([0, 0, 1, 1, 2, 2], 3)
    assert class_rows(None, 6) == (None, None)
    labels, rows = class_rows(10, 64)
    assert len(labels) == 64 and rows is None and labels == sorted(labels)
    assert sorted(set(np.bincount(labels))) == [6, 7]
    assert class_rows(10, 3)[0] == [0, 3, 6]  # fewer images than classes


def test_sample_grid_logs_to_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    model = _model()
    grid = callbacks.SampleGrid(
        str(tmp_path / "g.png"),
        num_images=2,
        sampler=DDIMSampler(num_steps=2),
        log_dir=str(tmp_path / "tb"),
    )
    grid.set_model(model)
    grid.write(1)
    assert any(f.startswith("events.out") for f in os.listdir(tmp_path / "tb"))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"every": 0}, "every=0"), ({"num_images": 0}, "num_images=0")],
)
def test_sample_grid_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        callbacks.SampleGrid(str(tmp_path / "g.png"), **kwargs)
    with pytest.raises(TypeError, match="filepath=3"):
        callbacks.SampleGrid(3)


def test_kid_callback_logs_kid_on_its_epochs(toy_images, tmp_path):
    model = _model()

    def features(images):
        flat = keras.ops.reshape(images, (keras.ops.shape(images)[0], -1))
        return keras.ops.stack(
            [keras.ops.mean(flat, axis=1), keras.ops.std(flat, axis=1)], axis=1
        )

    kid = callbacks.KIDCallback(
        toy_images[:16],
        feature_extractor=features,
        num_features=2,
        num_images=16,
        every=2,
        sampler=DDIMSampler(num_steps=2),
    )
    log = tmp_path / "log.csv"
    history = model.fit(
        toy_images,
        epochs=2,
        batch_size=32,
        verbose=0,
        callbacks=[kid, keras.callbacks.CSVLogger(str(log))],
    )
    values = history.history["kid"]
    assert math.isnan(values[0]) and math.isfinite(values[1])
    assert math.isfinite(history.history["kid_std"][1])
    assert "kid" in log.read_text().splitlines()[0]
    with pytest.raises(ValueError, match="real_images"):
        callbacks.KIDCallback(np.zeros((1, 8, 8, 1)), feature_extractor=None)


def test_atomic_model_checkpoint(tmp_path, toy_images):
    model = _model()
    checkpoint = callbacks.AtomicModelCheckpoint(str(tmp_path / "m.keras"), every=2)
    model.fit(toy_images, epochs=2, batch_size=32, verbose=0, callbacks=[checkpoint])
    assert os.listdir(tmp_path) == ["m.keras"]
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert int(loaded.optimizer.iterations.numpy()) == 4
    with pytest.raises(ValueError, match="filepath='m.h5'"):
        callbacks.AtomicModelCheckpoint("m.h5")


class _PoisonAt(keras.callbacks.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            weight = self.model.denoiser.trainable_variables[0]
            weight.assign(np.full(weight.shape, np.nan, "float32"))


def test_stop_on_non_finite_loss_raises_before_epoch_end_callbacks(
    tmp_path, toy_images
):
    model = _model()
    checkpoint = callbacks.AtomicModelCheckpoint(str(tmp_path / "m.keras"))
    with pytest.raises(callbacks.NonFiniteLossError) as info:
        model.fit(
            toy_images,
            epochs=3,
            batch_size=16,
            verbose=0,
            callbacks=[
                _PoisonAt(epoch=1, batch=2),
                callbacks.StopOnNonFiniteLoss(),
                checkpoint,
            ],
        )
    message = str(info.value)
    assert "epoch 2, step 3" in message and "optimizer step 7" in message
    assert "learning rate" in message and "loss scaling" in message
    # The checkpoint of epoch 1 is intact and finite.
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert int(loaded.optimizer.iterations.numpy()) == 4
    assert all(np.isfinite(np.array(v)).all() for v in loaded.weights)
