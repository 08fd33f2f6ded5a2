"""Fixtures shared by the sampler tests: diffusers' scheduler test harness."""

import numpy as np
import pytest
import tensorflow as tf


@pytest.fixture
def deter_sample():
    """diffusers' `dummy_sample_deter` (4, 3, 8, 8), transposed to NHWC."""
    nchw = (np.arange(768).reshape(3, 8, 8, 4) / 768).transpose(3, 0, 1, 2)
    return nchw.transpose(0, 2, 3, 1).astype(np.float32)


@pytest.fixture
def dummy_model():
    """diffusers' `dummy_model`: model(x, t) = x * t / (t + 1)."""

    def model(x, t):
        t = tf.reshape(t, (-1, 1, 1, 1))
        return x * t / (t + 1.0)

    return model


def _interpolated_abar(sigma_table, t):
    """alphas_cumprod at fractional `t`, interpolating sigma as diffusers' Euler."""
    low = tf.floor(t)
    frac = tf.reshape(t - low, (-1, 1, 1, 1))
    low = tf.cast(low, tf.int32)
    high = tf.minimum(low + 1, tf.shape(sigma_table)[0] - 1)
    sigma_low = tf.reshape(tf.gather(sigma_table, low), (-1, 1, 1, 1))
    sigma_high = tf.reshape(tf.gather(sigma_table, high), (-1, 1, 1, 1))
    sigma = (1.0 - frac) * sigma_low + frac * sigma_high
    return 1.0 / (1.0 + sigma**2)


@pytest.fixture
def oracle():
    """The exact denoiser of data that is a single point `x0`.

    For that data, eps = (x_t - sqrt(abar) x0) / sqrt(1 - abar) exactly, so
    every sampler that ends at a clean sample must return `x0`. abar at a
    fractional timestep interpolates sigma as diffusers' Euler does.
    """

    def make(schedule, x0, prediction_type="epsilon"):
        abar = schedule.alphas_cumprod_float64
        sigma_table = tf.constant(np.sqrt((1 - abar) / abar), tf.float32)

        def denoise(x, t):
            abar = _interpolated_abar(sigma_table, t)
            eps = (x - tf.sqrt(abar) * x0) / tf.sqrt(1.0 - abar)
            if prediction_type == "epsilon":
                return eps
            if prediction_type == "sample":
                return x0 + 0.0 * x
            return tf.sqrt(abar) * eps - tf.sqrt(1.0 - abar) * x0

        return denoise

    return make


@pytest.fixture
def gaussian_oracle():
    """The exact denoiser of data x0 ~ N(0, std**2), elementwise.

    E[eps | x_t] = sqrt(1 - abar) x_t / (abar std**2 + 1 - abar), so a correct
    sampler turns unit noise into samples of standard deviation `std`; x0 and
    v follow from eps and x_t.
    """

    def make(schedule, std, prediction_type="epsilon"):
        abar = schedule.alphas_cumprod_float64
        sigma_table = tf.constant(np.sqrt((1 - abar) / abar), tf.float32)

        def denoise(x, t):
            abar = _interpolated_abar(sigma_table, t)
            eps = tf.sqrt(1.0 - abar) * x / (abar * std**2 + 1.0 - abar)
            if prediction_type == "epsilon":
                return eps
            x0 = (x - tf.sqrt(1.0 - abar) * eps) / tf.sqrt(abar)
            if prediction_type == "sample":
                return x0
            return tf.sqrt(abar) * eps - tf.sqrt(1.0 - abar) * x0

        return denoise

    return make
