"""TimestepEmbedding: the closed form, config round trip, gradients, float32."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.layers import TimestepEmbedding

TIMESTEPS = np.array([0.0, 1.0, 10.5, 999.0], "float32")


def closed_form(t, dim, max_period=10000.0):
    """float64 sin(t f_i) and cos(t f_i), f_i = max_period ** (-i / half)."""
    half = dim // 2
    freqs = max_period ** (-np.arange(half) / half)
    args = np.asarray(t, "float64")[:, None] * freqs[None]
    return np.concatenate([np.sin(args), np.cos(args)], axis=-1), freqs


def test_output_shape_and_dtype():
    layer = TimestepEmbedding(16)
    outputs = layer(TIMESTEPS)
    assert tuple(outputs.shape) == (4, 16)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    symbolic = TimestepEmbedding(16)(keras.Input(()))
    assert tuple(symbolic.shape) == (None, 16)
    # Integer timesteps are fine too.
    np.testing.assert_array_equal(
        layer(np.array([0, 1, 999], "int32")), layer(np.array([0.0, 1.0, 999.0]))
    )


def test_timestep_zero_is_zeros_then_ones():
    outputs = keras.ops.convert_to_numpy(TimestepEmbedding(8)(np.zeros(2, "float32")))
    np.testing.assert_array_equal(outputs, [[0.0] * 4 + [1.0] * 4] * 2)


@pytest.mark.parametrize("dim, max_period", [(16, 10000.0), (6, 100.0)])
def test_matches_the_closed_form(dim, max_period):
    outputs = TimestepEmbedding(dim, max_period=max_period)(TIMESTEPS)
    expected, _ = closed_form(TIMESTEPS, dim, max_period)
    # float32 arguments up to ~1000 carry ~1e-4 of rounding into sin and cos.
    np.testing.assert_allclose(outputs, expected, atol=2e-4)


@pytest.mark.parametrize("dim", [0, 7, 8.0])
def test_dim_must_be_an_even_int(dim):
    with pytest.raises(ValueError, match=f"dim={dim!r}"):
        TimestepEmbedding(dim)


def test_config_round_trip_gives_the_same_output(check_config_round_trip):
    layer = TimestepEmbedding(12, max_period=500.0, name="embedding")
    config = check_config_round_trip(layer, TIMESTEPS)
    assert config["dim"] == 12 and config["max_period"] == 500.0


def test_gradient_with_respect_to_t_is_the_closed_form():
    # No weights: training moves the layers after it, through d(features)/dt.
    layer = TimestepEmbedding(8)
    assert layer.weights == []
    t = tf.constant(TIMESTEPS[:3])  # the fractional ones of a sampler's grid
    w = np.random.default_rng(0).normal(size=(8,)).astype("float32")
    with tf.GradientTape() as tape:
        tape.watch(t)
        total = keras.ops.sum(layer(t) * w)
    gradient = tape.gradient(total, t).numpy()
    features, freqs = closed_form(TIMESTEPS[:3], 8)
    sin, cos = np.split(features, 2, axis=-1)
    expected = (cos * freqs) @ w[:4] - (sin * freqs) @ w[4:]
    assert np.isfinite(gradient).all()
    np.testing.assert_allclose(gradient, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_computes_in_float32_under_mixed_precision(policy):
    reference = keras.ops.convert_to_numpy(TimestepEmbedding(16)(TIMESTEPS))
    # t reaches ~1000, beyond half precision's resolution of the phase: the
    # layer keeps float32 under a global policy and a dtype argument alike.
    keras.mixed_precision.set_global_policy(policy)
    for layer in (TimestepEmbedding(16), TimestepEmbedding(16, dtype=policy)):
        assert layer.compute_dtype == "float32"
        outputs = layer(TIMESTEPS)
        assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
        np.testing.assert_array_equal(outputs, reference)
