"""Stateless random draws that are the same numbers with and without XLA.

TensorFlow's `tf.random.stateless_normal` (and the float `stateless_uniform`)
draws other numbers for the same seed when XLA compiles it than its own
kernels do, even with `alg="philox"`; only the integer draws agree. Since
`DiffusionModel` compiles with XLA by default, the training noise and the
samplers' noise are built here from integer draws, so that one seed gives
one noise whatever the compilation (to float rounding of `log` and `cos`).
"""

import math

import tensorflow as tf

_ALG = "philox"


def uniform(shape, seed):
    """Float32 draws in [0, 1) on a grid of 2**-24, from 32 random bits each.

    Args:
        shape: the output shape.
        seed: int32 tensor of shape `(2,)`.
    """
    bits = tf.random.stateless_uniform(
        shape, seed=seed, minval=None, maxval=None, dtype=tf.int32, alg=_ALG
    )
    # The top 24 bits are exact in float32's mantissa.
    top = tf.bitwise.right_shift(tf.bitcast(bits, tf.uint32), 8)
    return tf.cast(top, tf.float32) * (2.0**-24)


def normal(shape, seed):
    """Standard normal float32 draws, by Box-Muller from two `uniform` draws.

    Args:
        shape: the output shape (a list, tuple or 1-D int tensor).
        seed: int32 tensor of shape `(2,)`.
    """
    shape = tf.convert_to_tensor(shape, dtype=tf.int32)
    u = uniform(tf.concat([[2], shape], axis=0), seed)
    radius = tf.sqrt(-2.0 * tf.math.log(1.0 - u[0]))  # 1 - u is in (0, 1]
    return radius * tf.cos((2.0 * math.pi) * u[1])
