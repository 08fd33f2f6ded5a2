"""The check `run_layer_test` makes of every layer's training: a gradient step."""

import keras
import numpy as np
import pytest
import tensorflow as tf


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
def check_gradient_step():
    return _check_gradient_step


@pytest.fixture
def check_mixed_precision():
    return _check_mixed_precision
