"""XLA by default in `DiffusionModel.compile`, and the fallback when it fails."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, NoiseSchedule
from tests.denoisers import conv_denoiser

# These tests are about jit_compile="auto" itself (tests/conftest.py).
pytestmark = pytest.mark.xla


def messages(caught):
    return [str(w.message) for w in caught]


def test_compile_uses_xla_unless_told_otherwise(make_unet):
    model = DiffusionModel(make_unet())
    model.compile(optimizer="adam")
    assert model.jit_compile is True
    model.compile(optimizer="adam", jit_compile=False)
    assert model.jit_compile is False
    model.compile(optimizer="adam", run_eagerly=True)
    assert model.jit_compile is False


def test_compile_under_a_strategy_keeps_xla_off(make_unet):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = DiffusionModel(make_unet())
        model.compile(optimizer="adam")
    assert model.jit_compile is False


@pytest.mark.parametrize("value", ["yes", 1.5, None])
def test_bad_jit_compile_is_refused(make_unet, value):
    model = DiffusionModel(make_unet())
    with pytest.raises(ValueError, match=f"jit_compile={value!r}"):
        model.compile(optimizer="adam", jit_compile=value)
    assert not model.compiled


@pytest.mark.heavy
def test_xla_gives_the_losses_of_the_eager_path(make_unet, toy_images):
    """XLA changes the order of float sums only: the same losses, step by step."""
    losses = {}
    for name, options in (
        ("default", {"jit_compile": True}),
        ("eager", {"run_eagerly": True}),
    ):
        keras.utils.set_random_seed(7)
        model = DiffusionModel(make_unet(), NoiseSchedule(100, "cosine"), seed=3)
        model.compile(optimizer=keras.optimizers.Adam(3e-3), **options)
        history = model.fit(toy_images[:32], batch_size=16, epochs=3, verbose=0)
        losses[name] = history.history["loss"]
        if name == "default":
            assert model.jit_compile is True
    np.testing.assert_allclose(losses["default"], losses["eager"], rtol=2e-4)
    assert losses["default"][-1] < losses["default"][0]


def test_a_denoiser_xla_cannot_compile_trains_and_samples_without_it(toy_images):
    model = DiffusionModel(conv_denoiser(host_op=True), NoiseSchedule(100, "cosine"))
    model.compile(optimizer="adam", jit_compile=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(toy_images, batch_size=16, epochs=2, verbose=0)
    fallback = [m for m in messages(caught) if "XLA could not compile" in m]
    assert len(fallback) == 1 and "the train step" in fallback[0]
    assert "PyFunc" in fallback[0]
    assert model.jit_compile is False
    assert np.all(np.isfinite(history.history["loss"]))
    images = model.generate(2, seed=0, verbose=0)
    assert images.shape == (2, 8, 8, 1)


def test_sampling_falls_back_when_xla_cannot_compile_the_loop():
    model = DiffusionModel(conv_denoiser(host_op=True), NoiseSchedule(100, "cosine"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = model.generate(2, seed=0, verbose=0)
    assert any("the sampling loop" in m for m in messages(caught))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = model.generate(2, seed=0, verbose=0)
    assert not any("XLA" in m for m in messages(caught))
    np.testing.assert_array_equal(first, again)


def test_xla_and_graph_sampling_agree(make_unet):
    model = DiffusionModel(make_unet(), NoiseSchedule(100, "cosine"), ema_decay=None)
    # A non-zero output: random weights where the U-Net starts at zero (its
    # last convolution), instead of compiling a train step to get there.
    rng = np.random.default_rng(0)
    for variable in model.denoiser.trainable_variables:
        if not np.any(variable.numpy()):
            variable.assign(rng.normal(0, 0.1, variable.shape).astype("float32"))
    model.compile(optimizer="adam")
    with_xla = model.generate(4, seed=5, verbose=0)
    model.compile(optimizer="adam", jit_compile=False)
    without = model.generate(4, seed=5, verbose=0)
    assert np.abs(without).max() > 0.1
    np.testing.assert_allclose(with_xla, without, atol=1e-4)
