"""ResidualBlock: shapes, config round trip, a training step, mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.layers import ResidualBlock

FILTERS = 8
EMBEDDING_DIM = 16


def block_inputs(channels, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, 8, 8, channels)).astype("float32")
    embedding = rng.normal(size=(batch, EMBEDDING_DIM)).astype("float32")
    return [x, embedding]


def randomize(layer, seed=1):
    """Distinct random values in every weight, the zero-initialised conv too."""
    for index, weight in enumerate(layer.weights):
        rng = np.random.default_rng([seed, index])
        weight.assign(rng.normal(0.0, 0.3, weight.shape).astype(weight.dtype))


def skip_kernel(layer):
    """The 1x1 projection of the skip path, found by its shape."""
    return [w for w in layer.weights if tuple(w.shape[:2]) == (1, 1)]


@pytest.mark.parametrize("channels", [4, FILTERS])
def test_output_shape_and_dtype(channels):
    layer = ResidualBlock(FILTERS, groups=2)
    inputs = block_inputs(channels)
    outputs = layer(inputs)
    assert tuple(outputs.shape) == (2, 8, 8, FILTERS)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    # Symbolic: the same shape, with an unknown batch.
    symbolic = ResidualBlock(FILTERS, groups=2)(
        [keras.Input((8, 8, channels)), keras.Input((EMBEDDING_DIM,))]
    )
    assert tuple(symbolic.shape) == (None, 8, 8, FILTERS)
    # A 1x1 projection on the skip path only where the channels change.
    assert len(skip_kernel(layer)) == (channels != FILTERS)


@pytest.mark.parametrize("channels", [4, FILTERS])
def test_fresh_block_is_its_skip_path(channels):
    layer = ResidualBlock(FILTERS, groups=2)
    x, embedding = block_inputs(channels)
    outputs = keras.ops.convert_to_numpy(layer([x, embedding]))
    if channels == FILTERS:
        expected = x
    else:
        (kernel,) = skip_kernel(layer)  # its bias starts at zero
        expected = np.einsum("bhwc,cf->bhwf", x, kernel.numpy()[0, 0])
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    # Once off its zero init, the block adds a residual that the embedding
    # conditions.
    randomize(layer)
    changed = keras.ops.convert_to_numpy(layer([x, embedding]))
    assert not np.allclose(changed, expected, atol=1e-3)
    other = keras.ops.convert_to_numpy(layer([x, embedding[::-1]]))
    assert not np.allclose(changed, other, atol=1e-3)


def test_config_round_trip_gives_the_same_output(check_config_round_trip):
    layer = ResidualBlock(FILTERS, groups=4, dropout=0.25, name="block")
    inputs = block_inputs(4)
    layer(inputs)
    randomize(layer)
    config = check_config_round_trip(layer, inputs)
    assert config["filters"] == FILTERS
    assert config["groups"] == 4 and config["dropout"] == 0.25


def test_dropout_only_in_training():
    layer = ResidualBlock(FILTERS, groups=2, dropout=0.5)
    inputs = block_inputs(FILTERS)
    layer(inputs)
    randomize(layer)
    inference = layer(inputs, training=False)
    np.testing.assert_array_equal(layer(inputs, training=False), inference)
    assert not np.allclose(layer(inputs, training=True), inference, atol=1e-3)


def test_gradient_step(check_gradient_step):
    layer = ResidualBlock(FILTERS, groups=2)
    target = np.random.default_rng(5).normal(size=(2, 8, 8, FILTERS))
    inputs, target = block_inputs(4), target.astype("float32")
    # At init only the zero-initialised conv and the skip path move the output.
    check_gradient_step(layer, inputs, target)

    # Off its zero init, every weight reaches the output.
    randomize(layer)
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.ops.square(layer(inputs) - target))
    gradients = tape.gradient(loss, layer.trainable_weights)
    for weight, gradient in zip(layer.trainable_weights, gradients, strict=True):
        assert np.isfinite(gradient.numpy()).all(), weight.path
        assert np.abs(gradient.numpy()).max() > 0, weight.path


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("how", ["global policy", "dtype argument"])
def test_mixed_precision(policy, how, check_mixed_precision):
    outputs = check_mixed_precision(
        lambda **kw: ResidualBlock(FILTERS, groups=2, **kw),
        block_inputs(4),
        policy,
        how,
    )
    assert np.isfinite(keras.ops.convert_to_numpy(outputs).astype("float32")).all()
