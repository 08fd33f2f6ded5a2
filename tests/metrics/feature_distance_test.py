"""What FrechetDistance and KernelDistance share (FeatureDistance): saved
real statistics, the checks of update_state, the InceptionV3 extractor."""

import keras
import numpy as np
import pytest

from keras_diffusion.metrics import (
    FrechetDistance,
    KernelDistance,
    load_statistics,
)


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

    # On the inputs themselves (no feature extractor).
    pixels = dict(feature_extractor=None, num_features=5, subset_size=100, seed=4)
    kid = KernelDistance(**pixels)
    kid.update_state(real, fake)
    kid_path = tmp_path / "real_kid.npz"
    kid.save_real_statistics(kid_path)
    kid_loaded = KernelDistance(**pixels, real_statistics=kid_path)
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
