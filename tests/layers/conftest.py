"""The checks every layer's tests make: a config round trip, a gradient step,
mixed precision."""

import keras
import numpy as np
import pytest
import tensorflow as tf


def _check_config_round_trip(layer, inputs):
    """A twin from `layer`'s config, and one through Keras's registry, are of
    its class, have its config and, given its weights, its output. Returns
    the config."""
    config = layer.get_config()
    expected = layer(inputs)
    for twin in (
        type(layer).from_config(config),
        keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(layer)
        ),
    ):
        assert type(twin) is type(layer)
        assert twin.get_config() == config
        twin(inputs)
        twin.set_weights(layer.get_weights())
        np.testing.assert_allclose(twin(inputs), expected, rtol=1e-6, atol=1e-6)
    return config


def _check_gradient_step(layer, inputs, target, learning_rate=0.05):
    """Every trainable weight gets a finite gradient, and one SGD step on the
    MSE to `target` changes the output and lowers the loss."""

    def loss_and_gradients():
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(layer(inputs) - target))
        return loss, tape.gradient(loss, layer.trainable_weights)

    loss, gradients = loss_and_gradients()
    assert layer.trainable_weights and not layer.non_trainable_weights
    for weight, gradient in zip(layer.trainable_weights, gradients, strict=True):
        assert gradient is not None, weight.path
        assert np.isfinite(gradient.numpy()).all(), weight.path
    before = keras.ops.convert_to_numpy(layer(inputs))
    keras.optimizers.SGD(learning_rate).apply(gradients, layer.trainable_weights)
    assert not np.allclose(layer(inputs), before, atol=1e-4)
    assert float(loss_and_gradients()[0]) < float(loss)


def _check_mixed_precision(make_layer, inputs, policy, how):
    """A layer under a mixed `policy`, set globally or by `dtype=` (`how`),
    computes in half precision and keeps float32 weights."""
    if how == "global policy":
        keras.mixed_precision.set_global_policy(policy)
        layer = make_layer()
    else:
        layer = make_layer(dtype=policy)
    compute_dtype = policy.removeprefix("mixed_")
    assert layer.compute_dtype == compute_dtype
    assert layer.variable_dtype == "float32"
    outputs = layer(inputs)
    assert all(w.dtype == "float32" for w in layer.weights)
    assert keras.backend.standardize_dtype(outputs.dtype) == compute_dtype
    return outputs


@pytest.fixture
def check_config_round_trip():
    return _check_config_round_trip


@pytest.fixture
def check_gradient_step():
    return _check_gradient_step


@pytest.fixture
def check_mixed_precision():
    return _check_mixed_precision
