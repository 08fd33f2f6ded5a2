"""kernel_distance and the streaming KernelDistance: unbiasedness, the closed
form for Gaussians, streaming against one shot, the reservoir."""

import numpy as np
import tensorflow as tf

from keras_diffusion.metrics import KernelDistance, kernel_distance


def _pixel_kid(num_features, **kwargs):
    """A `KernelDistance` on the inputs themselves (no feature extractor)."""
    return KernelDistance(feature_extractor=None, num_features=num_features, **kwargs)


def _biased_mmd2(x, y):
    d = x.shape[1]
    k = lambda a, b: (a @ b.T / d + 1.0) ** 3  # noqa: E731
    m = len(x)
    return (k(x, x).sum() + k(y, y).sum() - 2.0 * k(x, y).sum()) / m**2


def test_kid_of_identical_distributions_is_unbiased():
    rng = np.random.default_rng(7)
    unbiased, biased = [], []
    for _ in range(300):
        x, y = rng.normal(size=(2, 40, 4))
        unbiased.append(kernel_distance(x, y, num_subsets=1, subset_size=40)[0])
        biased.append(_biased_mmd2(x, y))
    unbiased, biased = np.array(unbiased), np.array(biased)
    standard_error = unbiased.std() / np.sqrt(len(unbiased))
    assert abs(unbiased.mean()) < 3 * standard_error
    # The biased V-statistic is systematically positive: the test can fail.
    assert biased.mean() > 10 * standard_error
    assert (unbiased < 0).mean() > 0.3


def _gaussian_moment_tensors(mu):
    """E x, E x(x)x, E x(x)x(x)x of N(mu, I)."""
    eye = np.eye(len(mu))
    third = (
        np.einsum("i,j,k->ijk", mu, mu, mu)
        + np.einsum("i,jk->ijk", mu, eye)
        + np.einsum("j,ik->ijk", mu, eye)
        + np.einsum("k,ij->ijk", mu, eye)
    )
    return mu, eye + np.outer(mu, mu), third


def test_kid_matches_closed_form_for_gaussians():
    # (x.y/d + 1)^3 = sum_k C(3, k) <x^(k), y^(k)> / d^k over tensor powers, so
    # MMD^2 = sum_k C(3, k) / d^k |E x^(k) - E y^(k)|^2 (1.983176 here).
    d, mu = 2, np.array([0.6, -0.4])
    expected = sum(
        c / d**k * np.sum((p - q) ** 2)
        for k, (c, p, q) in enumerate(
            zip(
                (3, 3, 1),
                _gaussian_moment_tensors(np.zeros(d)),
                _gaussian_moment_tensors(mu),
                strict=True,
            ),
            start=1,
        )
    )
    rng = np.random.default_rng(8)
    x = rng.normal(size=(20000, d))
    y = rng.normal(mu, size=(20000, d))
    mean, std = kernel_distance(x, y, num_subsets=60, subset_size=500, seed=0)
    # Tolerance: the cubic kernel is heavy-tailed; 20000 samples give ~5%.
    np.testing.assert_allclose(mean, expected, rtol=0.15)
    assert 0 < std < mean


def test_kid_metric_of_identical_distributions_is_near_zero():
    rng = np.random.default_rng(9)
    kid = _pixel_kid(8, num_subsets=50, subset_size=200, max_samples=1000, seed=0)
    kid.update_state(rng.normal(size=(1000, 8)), rng.normal(size=(1000, 8)))
    same = kid.result()
    assert set(same) == {"kid", "kid_std"}
    assert abs(same["kid"]) < same["kid_std"]
    kid.reset_state()
    kid.update_state(rng.normal(size=(1000, 8)), rng.normal(0.5, size=(1000, 8)))
    different = kid.result()
    assert different["kid"] > 10 * different["kid_std"] / np.sqrt(50)


def test_kid_streaming_equals_one_shot():
    rng = np.random.default_rng(10)
    real = rng.normal(size=(300, 2, 2, 1)).astype("float32")
    fake = rng.normal(0.2, size=(250, 2, 2, 1)).astype("float32")
    kwargs = dict(num_subsets=20, subset_size=100, max_samples=400, seed=3)
    streamed = _pixel_kid(4, **kwargs)
    compiled = tf.function(lambda x: streamed.update_state(real_images=x))
    for start in range(0, 300, 70):
        compiled(real[start : start + 70])
    for start in range(0, 250, 33):
        streamed.update_state(generated_images=fake[start : start + 33])
    one_shot = _pixel_kid(4, **kwargs)
    one_shot.update_state(real, fake)
    expected = kernel_distance(
        real.reshape(300, -1), fake.reshape(250, -1), 20, 100, seed=3
    )
    assert streamed.result() == one_shot.result()
    np.testing.assert_allclose(streamed.result()["kid"], expected[0], rtol=1e-12)


def test_kid_reservoir_is_bounded_and_uniform():
    kid = _pixel_kid(1, subset_size=10, max_samples=500, seed=1)
    indices = np.arange(8000, dtype="float32")[:, None]
    for start in range(0, 8000, 250):
        kid.update_state(real_images=indices[start : start + 250])
    kept = kid.get_real_statistics()["features"].ravel()
    assert kept.shape == (500,)
    assert len(np.unique(kept)) == 500
    assert set(kept) <= set(indices.ravel())
    # Uniform over all 8000: mean 4000, standard error 2309 / sqrt(500) ~ 103.
    assert abs(kept.mean() - 4000) < 400
    assert 0.4 < (kept < 4000).mean() < 0.6
    assert all(v.shape[0] <= 501 for v in kid.variables if len(v.shape) == 2)
