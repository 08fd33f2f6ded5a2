import keras
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from keras_diffusion.metrics import (
    FrechetDistance,
    KernelDistance,
    PCAFrechet,
    frechet_distance,
    kernel_distance,
    load_statistics,
)


def _diagonal_fid(mu1, a, mu2, b):
    """Closed form for diagonal covariances a, b."""
    return float(np.sum((mu1 - mu2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))


def _pixel_kid(num_features, **kwargs):
    """A `KernelDistance` on the inputs themselves (no feature extractor)."""
    return KernelDistance(feature_extractor=None, num_features=num_features, **kwargs)


def _biased_mmd2(x, y):
    d = x.shape[1]
    k = lambda a, b: (a @ b.T / d + 1.0) ** 3  # noqa: E731
    m = len(x)
    return (k(x, x).sum() + k(y, y).sum() - 2.0 * k(x, y).sum()) / m**2


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


# --- kernel_distance and KernelDistance ---


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


# --- saved statistics ---


def test_real_statistics_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(11)
    real, fake = rng.normal(size=(500, 5)), rng.normal(0.3, size=(500, 5))
    fid = FrechetDistance(feature_extractor=None, num_features=5)
    fid.update_state(real, fake)
    path = tmp_path / "real_fid.npz"
    fid.save_real_statistics(path)
    stats = load_statistics(path)
    np.testing.assert_allclose(stats["mu"], real.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["sigma"], np.cov(real, rowvar=False), atol=1e-12)
    assert stats["num_samples"] == 500
    loaded = FrechetDistance(
        feature_extractor=None, num_features=5, real_statistics=path
    )
    loaded.update_state(generated_images=fake)
    np.testing.assert_allclose(loaded.result(), fid.result(), rtol=1e-12)
    loaded.reset_state()  # Loaded statistics survive a reset.
    loaded.update_state(generated_images=fake)
    np.testing.assert_allclose(loaded.result(), fid.result(), rtol=1e-12)
    assert loaded.get_config()["real_statistics"] == str(path)
    with pytest.raises(ValueError, match="pass only `generated_images`"):
        loaded.update_state(real_images=real)

    kid = _pixel_kid(5, subset_size=100, seed=4)
    kid.update_state(real, fake)
    kid_path = tmp_path / "real_kid.npz"
    kid.save_real_statistics(kid_path)
    kid_loaded = _pixel_kid(5, subset_size=100, seed=4, real_statistics=kid_path)
    kid_loaded.update_state(generated_images=fake)
    assert kid_loaded.result() == kid.result()


def test_real_statistics_with_wrong_dimension_raise(tmp_path):
    path = tmp_path / "stats.npz"
    np.savez(path, mu=np.zeros(3), sigma=np.eye(3))
    with pytest.raises(ValueError, match="num_features=4"):
        FrechetDistance(feature_extractor=None, num_features=4, real_statistics=path)
    with pytest.raises(ValueError, match="real_statistics="):
        KernelDistance(feature_extractor=None, num_features=3, real_statistics=path)
    with pytest.raises(ValueError, match="path="):
        FrechetDistance(
            feature_extractor=None,
            num_features=3,
            real_statistics=tmp_path / "missing.npz",
        )


# --- argument checks ---


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda: frechet_distance(
                np.zeros((2, 1)), np.eye(2), np.zeros(2), np.eye(2)
            ),
            ValueError,
            r"`mu1`.*mu1.shape=\(2, 1\)",
        ),
        (
            lambda: frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), np.eye(3)),
            ValueError,
            r"`sigma2`.*sigma2.shape=\(3, 3\)",
        ),
        (
            lambda: frechet_distance(np.zeros(2), np.eye(2), np.zeros(3), np.eye(3)),
            ValueError,
            r"mu1.shape=\(2,\), mu2.shape=\(3,\)",
        ),
        (
            lambda: kernel_distance(np.zeros((10, 2)), np.zeros((10, 3)), 1, 5),
            ValueError,
            r"real_features.shape=\(10, 2\)",
        ),
        (
            lambda: PCAFrechet(np.zeros((10, 2)), np.zeros((10, 3))),
            ValueError,
            r"half_a.shape=\(10, 2\), half_b.shape=\(10, 3\)",
        ),
        (
            lambda: kernel_distance(np.zeros((10, 2)), np.zeros((8, 2)), 1, 9),
            ValueError,
            "subset_size=9",
        ),
        (
            lambda: FrechetDistance(feature_extractor="vgg16"),
            ValueError,
            "feature_extractor='vgg16'",
        ),
        (
            lambda: FrechetDistance(feature_extractor=3),
            TypeError,
            "feature_extractor=3",
        ),
        (
            lambda: FrechetDistance(feature_extractor=None),
            ValueError,
            "num_features=None",
        ),
        (
            lambda: FrechetDistance(weights="/no/such/file.h5"),
            ValueError,
            "weights='/no/such/file.h5'",
        ),
        (
            lambda: FrechetDistance(
                feature_extractor=keras.Sequential(
                    [keras.Input((3,)), keras.layers.Dense(2)]
                ),
                num_features=5,
            ),
            ValueError,
            "num_features=5",
        ),
        (
            lambda: KernelDistance(
                feature_extractor=None, num_features=2, subset_size=1
            ),
            ValueError,
            "subset_size=1",
        ),
        (
            lambda: KernelDistance(
                feature_extractor=None, num_features=2, subset_size=50, max_samples=20
            ),
            ValueError,
            "subset_size=50",
        ),
        (
            lambda: KernelDistance(
                feature_extractor=None, num_features=2, num_subsets=2.5
            ),
            TypeError,
            "num_subsets=2.5",
        ),
        (
            lambda: FrechetDistance(
                feature_extractor=None, num_features=2, real_statistics={"mu": 0}
            ),
            TypeError,
            "real_statistics=",
        ),
    ],
)
def test_bad_arguments_raise_and_name_the_value(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_bad_update_inputs_raise():
    fid = FrechetDistance(feature_extractor=None, num_features=4)
    with pytest.raises(ValueError, match=r"generated_images.shape=\(5, 3\)"):
        fid.update_state(generated_images=np.zeros((5, 3)))
    with pytest.raises(ValueError, match="real_images=None, generated_images=None"):
        fid.update_state()
    with pytest.raises(ValueError, match=r"real_images.shape=\(4,\)"):
        fid.update_state(real_images=np.zeros(4))
    fid.update_state(real_images=np.zeros((1, 4)), generated_images=np.zeros((5, 4)))
    with pytest.raises(ValueError, match="at least 2 real samples"):
        fid.result()
    kid = KernelDistance(feature_extractor=None, num_features=4, subset_size=10)
    kid.update_state(np.zeros((20, 4)), np.zeros((6, 4)))
    with pytest.raises(ValueError, match=r"6 generated\). Received: subset_size=10"):
        kid.result()


# --- InceptionV3 ---


def test_inception_download_failure_gives_a_clear_error(monkeypatch):
    def no_network(**kwargs):
        assert kwargs["weights"] == "imagenet"
        raise Exception(  # What keras.utils.get_file raises offline.
            "URL fetch failure on https://storage.googleapis.com/...: None -- "
            "[Errno -2] Name or service not known"
        )

    monkeypatch.setattr(keras.applications, "InceptionV3", no_network)
    with pytest.raises(RuntimeError, match="weights=.*feature_extractor"):
        FrechetDistance()
    with pytest.raises(RuntimeError, match="URL fetch failure"):
        KernelDistance()


def test_inception_from_local_weights_resizes_and_repeats_grayscale(tmp_path):
    reference = keras.applications.InceptionV3(
        include_top=False, weights=None, input_shape=(299, 299, 3), pooling="avg"
    )
    path = str(tmp_path / "inception.weights.h5")
    reference.save_weights(path)
    fid = FrechetDistance(weights=path)
    assert fid.num_features == 2048
    gray = np.random.default_rng(12).uniform(-1, 1, (2, 16, 16, 1)).astype("float32")
    features = fid.extract_features(gray)
    rgb = keras.ops.image.resize(np.repeat(gray, 3, axis=-1), (299, 299))
    np.testing.assert_allclose(features, reference(rgb), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"images.shape=\(2, 16, 16, 2\)"):
        fid.extract_features(np.zeros((2, 16, 16, 2)))
