"""The native-resolution judge: area downsampling and PCAFrechet."""

import numpy as np
import pytest

from keras_diffusion import metrics


def test_pca_frechet_matches_scikit_learn_pca():
    decomposition = pytest.importorskip("sklearn.decomposition")
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(12, 12))
    half_a, half_b = rng.normal(size=(2, 200, 12)) @ mixing
    judge = metrics.PCAFrechet(half_a, half_b, num_samples=100, num_components=5)
    pca = decomposition.PCA(5).fit(half_a)
    expected = metrics.feature_frechet_distance(
        pca.transform(half_a[:100]), pca.transform(half_b)
    )
    assert judge.floor == pytest.approx(expected, rel=1e-9)


def test_area_downsample_takes_block_means():
    images = np.arange(2 * 4 * 6 * 3, dtype=float).reshape(2, 4, 6, 3)
    small = metrics.area_downsample(images, (2, 3))
    assert small.shape == (2, 2, 3, 3)
    np.testing.assert_allclose(small[1, 0, 2], images[1, :2, 4:, :].mean((0, 1)))
    with pytest.raises(ValueError, match="size=4"):
        metrics.area_downsample(images, 4)
