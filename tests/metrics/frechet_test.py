"""frechet_distance and the streaming FrechetDistance: closed forms, scipy,
streaming against one shot."""

import keras
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from keras_diffusion.metrics import FrechetDistance, frechet_distance


def _diagonal_fid(mu1, a, mu2, b):
    """Closed form for diagonal covariances a, b."""
    return float(np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))


# --- frechet_distance, the plain function ---


def test_frechet_distance_closed_form_for_diagonal_gaussians():
    mu1, mu2 = np.array([0.0, 1.0, -2.0]), np.array([0.5, 1.0, 0.0])
    a, b = np.array([1.0, 4.0, 0.25]), np.array([2.0, 1.0, 0.25])
    expected = _diagonal_fid(mu1, a, mu2, b)
    result = frechet_distance(mu1, np.diag(a), mu2, np.diag(b))
    np.testing.assert_allclose(result, expected, rtol=1e-12)
    assert frechet_distance([0.0], [[1.0]], [1.0], [[4.0]]) == pytest.approx(2.0)


def test_frechet_distance_matches_scipy_sqrtm_for_full_covariances():
    rng = np.random.default_rng(0)
    d = 6
    a, b = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    sigma1, sigma2 = a @ a.T + np.eye(d), b @ b.T + 0.5 * np.eye(d)
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    covmean = scipy.linalg.sqrtm(sigma1 @ sigma2).real
    expected = np.sum((mu1 - mu2) ** 2) + np.trace(sigma1 + sigma2 - 2 * covmean)
    result = frechet_distance(mu1, sigma1, mu2, sigma2)
    np.testing.assert_allclose(result, expected, rtol=1e-9)
    # Symmetric in its two Gaussians.
    np.testing.assert_allclose(
        frechet_distance(mu2, sigma2, mu1, sigma1), result, rtol=1e-9
    )


def test_frechet_distance_of_a_gaussian_to_itself_is_zero():
    rng = np.random.default_rng(1)
    features = rng.normal(size=(300, 32)) @ rng.normal(size=(32, 32))
    mu, sigma = features.mean(0), np.cov(features, rowvar=False)
    assert frechet_distance(mu, sigma, mu, sigma) < 1e-8 * np.trace(sigma)


def test_frechet_distance_is_safe_for_singular_covariances():
    rng = np.random.default_rng(2)
    # Known answer with zero variances: the closed form still holds.
    a, b = np.array([1.0, 0.0, 4.0, 0.0]), np.array([9.0, 0.0, 0.0, 0.0])
    zeros = np.zeros(4)
    np.testing.assert_allclose(
        frechet_distance(zeros, np.diag(a), zeros, np.diag(b)),
        _diagonal_fid(zeros, a, zeros, b),
        rtol=1e-12,
    )
    # Rank-3 features in 64 dimensions from fewer samples than dimensions.
    basis = rng.normal(size=(3, 64))
    x = rng.normal(size=(20, 3)) @ basis
    y = rng.normal(size=(30, 3)) @ basis + 0.1
    sx, sy = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    # Rounding leaves eigenvalues of order -1e-15: sqrtm gives complex output.
    assert np.linalg.eigvalsh(sx).min() < 0
    distance = frechet_distance(x.mean(0), sx, y.mean(0), sy)
    assert np.isfinite(distance) and distance > 0
    self_distance = frechet_distance(x.mean(0), sx, x.mean(0), sx)
    assert np.isfinite(self_distance) and 0 <= self_distance < 1e-8 * np.trace(sx)
    # A covariance with a slightly negative eigenvalue still gives a real result.
    perturbed = np.diag([1.0, 1.0, -1e-12])
    result = frechet_distance(np.zeros(3), perturbed, np.zeros(3), np.eye(3))
    np.testing.assert_allclose(result, 1.0, atol=1e-5)


# --- FrechetDistance, the streaming metric ---


def test_fid_from_samples_matches_closed_form():
    rng = np.random.default_rng(3)
    mu1, a = np.array([0.0, 0.0, 1.0, 0.0]), np.array([1.0, 2.0, 0.5, 1.0])
    mu2, b = np.array([1.0, 0.0, 0.0, 0.5]), np.array([4.0, 1.0, 0.5, 0.25])
    real = rng.normal(mu1, np.sqrt(a), size=(40000, 4)).astype("float32")
    fake = rng.normal(mu2, np.sqrt(b), size=(40000, 4)).astype("float32")
    fid = FrechetDistance(feature_extractor=None, num_features=4)
    for start in range(0, 40000, 8000):
        fid.update_state(real[start : start + 8000], fake[start : start + 8000])
    expected = _diagonal_fid(mu1, a, mu2, b)  # 2.25 + 1 + 0.1716 + 0.25
    np.testing.assert_allclose(fid.result(), expected, rtol=0.03)


def test_fid_of_a_set_to_itself_is_zero():
    images = np.random.default_rng(4).uniform(-1, 1, size=(200, 4, 4, 1))
    fid = FrechetDistance(feature_extractor=None, num_features=16)
    fid.update_state(real_images=images, generated_images=images)
    assert 0 <= fid.result() < 1e-9


def test_fid_streaming_equals_one_shot():
    rng = np.random.default_rng(5)
    real = rng.normal(size=(257, 3, 3, 1)).astype("float32")
    fake = (rng.normal(size=(191, 3, 3, 1)) * 1.5 + 0.3).astype("float32")
    one_shot = FrechetDistance(feature_extractor=None, num_features=9)
    one_shot.update_state(real_images=real, generated_images=fake)
    streamed = FrechetDistance(feature_extractor=None, num_features=9)
    compiled = tf.function(lambda x: streamed.update_state(generated_images=x))
    for start, stop in [(0, 1), (1, 100), (100, 257)]:
        streamed.update_state(real_images=real[start:stop])
    for start, stop in [(0, 64), (64, 128), (128, 191)]:
        compiled(fake[start:stop])
    np.testing.assert_allclose(streamed.result(), one_shot.result(), rtol=1e-10)
    # And both equal the plain function on NumPy means and covariances.
    x, y = real.reshape(257, -1), fake.reshape(191, -1)
    expected = frechet_distance(
        x.mean(0), np.cov(x, rowvar=False), y.mean(0), np.cov(y, rowvar=False)
    )
    np.testing.assert_allclose(one_shot.result(), expected, rtol=1e-6)
    # reset_state clears both sets.
    streamed.reset_state()
    with pytest.raises(ValueError, match="at least 2 real samples"):
        streamed.result()


def test_fid_with_a_keras_model_extractor_and_config_round_trip():
    extractor = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(4, 3, activation="tanh"),
            keras.layers.GlobalAveragePooling2D(),
        ]
    )
    fid = FrechetDistance(feature_extractor=extractor)
    assert fid.num_features == 4
    images = np.random.default_rng(6).uniform(-1, 1, (64, 8, 8, 1))
    fid.update_state(real_images=images, generated_images=images * 0.5)
    features = extractor(images).numpy().astype(np.float64)
    half = extractor(images * 0.5).numpy().astype(np.float64)
    expected = frechet_distance(
        features.mean(0),
        np.cov(features, rowvar=False),
        half.mean(0),
        np.cov(half, rowvar=False),
    )
    np.testing.assert_allclose(fid.result(), expected, rtol=1e-5)
    # Resetting the metric leaves the extractor's weights alone.
    weights = [w.numpy() for w in extractor.weights]
    fid.reset_state()
    for before, after in zip(weights, extractor.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(fid)
    )
    assert isinstance(restored, FrechetDistance)
    assert restored.get_config()["num_features"] == 4
    assert restored.name == "fid"
