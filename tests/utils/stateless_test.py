import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.utils import stateless

SEED = tf.constant([3, 9], tf.int32)


@pytest.mark.parametrize("draw", [stateless.normal, stateless.uniform])
def test_the_same_numbers_with_and_without_xla(draw):
    graph = tf.function(lambda: draw([4096], SEED), autograph=False)()
    xla = tf.function(lambda: draw([4096], SEED), jit_compile=True, autograph=False)()
    np.testing.assert_allclose(xla.numpy(), graph.numpy(), atol=2e-6)
    np.testing.assert_array_equal(draw([4096], SEED).numpy(), graph.numpy())


def test_normal_draws_are_standard_normal():
    from scipy import stats

    z = stateless.normal((64, 32, 32), SEED).numpy().ravel()
    assert z.dtype == np.float32 and z.shape == (64 * 32 * 32,)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    other = stateless.normal((64, 32, 32), SEED + 1).numpy().ravel()
    assert abs(np.corrcoef(z, other)[0, 1]) < 0.01


def test_uniform_draws_fill_the_unit_interval():
    u = stateless.uniform([100_000], SEED).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    counts, _ = np.histogram(u, bins=10, range=(0.0, 1.0))
    assert counts.min() > 9_500 and counts.max() < 10_500
