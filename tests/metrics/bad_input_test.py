"""The metrics refuse bad input with a clear error (tests/refusal.py)."""

import keras
import numpy as np
import pytest

from keras_diffusion import metrics
from tests import refusal

METRIC_CASES = [
    (
        "unknown feature extractor",
        lambda: metrics.FrechetDistance(feature_extractor="clip"),
        ValueError,
        ["feature_extractor='clip'"],
    ),
    (
        "num_features 0",
        lambda: metrics.FrechetDistance(feature_extractor=None, num_features=0),
        ValueError,
        ["num_features=0"],
    ),
    (
        "missing statistics file",
        lambda: metrics.FrechetDistance(
            feature_extractor=None, num_features=2, real_statistics="/no/such.npz"
        ),
        ValueError,
        ["/no/such.npz"],
    ),
    (
        "missing weights file",
        lambda: metrics.FrechetDistance(weights="/no/such.h5"),
        ValueError,
        ["weights='/no/such.h5'"],
    ),
    (
        "feature count mismatch",
        lambda: metrics.frechet_distance([0.0], [[1.0]], [0.0, 1.0], np.eye(2)),
        ValueError,
        ["mu1.shape=(1,)", "mu2.shape=(2,)"],
    ),
    (
        "mean of strings",
        lambda: metrics.frechet_distance("a", [[1.0]], [0.0], [[1.0]]),
        TypeError,
        ["mu1='a'"],
    ),
    (
        "KID subset larger than the sets",
        lambda: metrics.kernel_distance(np.zeros((3, 2)), np.zeros((3, 2)), 1, 5),
        ValueError,
        ["subset_size=5"],
    ),
    (
        "KID features 1D",
        lambda: metrics.kernel_distance(np.zeros(3), np.zeros((3, 2))),
        ValueError,
        ["real_features.shape=(3,)"],
    ),
    (
        "KID seed str",
        lambda: metrics.KernelDistance(
            feature_extractor=None, num_features=2, seed="a"
        ),
        TypeError,
        ["seed='a'"],
    ),
    (
        "update with nothing",
        lambda: metrics.FrechetDistance(
            feature_extractor=None, num_features=2
        ).update_state(),
        ValueError,
        ["real_images=None", "generated_images=None"],
    ),
    (
        "images of other size than the features",
        lambda: metrics.FrechetDistance(
            feature_extractor=None, num_features=2
        ).update_state(np.zeros((3, 3))),
        ValueError,
        ["real_images.shape=(3, 3)"],
    ),
    (
        "mean of rank 2",
        lambda: metrics.frechet_distance(
            np.zeros((2, 1)), np.eye(2), np.zeros(2), np.eye(2)
        ),
        ValueError,
        ["`mu1`", "mu1.shape=(2, 1)"],
    ),
    (
        "covariance of other size than the mean",
        lambda: metrics.frechet_distance(
            np.zeros(2), np.eye(2), np.zeros(2), np.eye(3)
        ),
        ValueError,
        ["`sigma2`", "sigma2.shape=(3, 3)"],
    ),
    (
        "Gaussians of other sizes",
        lambda: metrics.frechet_distance(
            np.zeros(2), np.eye(2), np.zeros(3), np.eye(3)
        ),
        ValueError,
        ["mu1.shape=(2,), mu2.shape=(3,)"],
    ),
    (
        "KID feature count mismatch",
        lambda: metrics.kernel_distance(np.zeros((10, 2)), np.zeros((10, 3)), 1, 5),
        ValueError,
        ["real_features.shape=(10, 2)"],
    ),
    (
        "PCA-Frechet halves of other feature counts",
        lambda: metrics.PCAFrechet(np.zeros((10, 2)), np.zeros((10, 3))),
        ValueError,
        ["half_a.shape=(10, 2), half_b.shape=(10, 3)"],
    ),
    (
        "KID subset larger than the generated set",
        lambda: metrics.kernel_distance(np.zeros((10, 2)), np.zeros((8, 2)), 1, 9),
        ValueError,
        ["subset_size=9"],
    ),
    (
        "another unknown feature extractor",
        lambda: metrics.FrechetDistance(feature_extractor="vgg16"),
        ValueError,
        ["feature_extractor='vgg16'"],
    ),
    (
        "feature extractor int",
        lambda: metrics.FrechetDistance(feature_extractor=3),
        TypeError,
        ["feature_extractor=3"],
    ),
    (
        "no extractor and no num_features",
        lambda: metrics.FrechetDistance(feature_extractor=None),
        ValueError,
        ["num_features=None"],
    ),
    (
        "missing weights file in a folder",
        lambda: metrics.FrechetDistance(weights="/no/such/file.h5"),
        ValueError,
        ["weights='/no/such/file.h5'"],
    ),
    (
        "num_features other than the extractor's",
        lambda: metrics.FrechetDistance(
            feature_extractor=keras.Sequential(
                [keras.Input((3,)), keras.layers.Dense(2)]
            ),
            num_features=5,
        ),
        ValueError,
        ["num_features=5"],
    ),
    (
        "KID subset_size 1",
        lambda: metrics.KernelDistance(
            feature_extractor=None, num_features=2, subset_size=1
        ),
        ValueError,
        ["subset_size=1"],
    ),
    (
        "KID subset larger than the reservoir",
        lambda: metrics.KernelDistance(
            feature_extractor=None, num_features=2, subset_size=50, max_samples=20
        ),
        ValueError,
        ["subset_size=50"],
    ),
    (
        "KID num_subsets float",
        lambda: metrics.KernelDistance(
            feature_extractor=None, num_features=2, num_subsets=2.5
        ),
        TypeError,
        ["num_subsets=2.5"],
    ),
    (
        "real_statistics a dict",
        lambda: metrics.FrechetDistance(
            feature_extractor=None, num_features=2, real_statistics={"mu": 0}
        ),
        TypeError,
        ["real_statistics="],
    ),
]


@pytest.mark.parametrize("call, error, fragments", refusal.params(METRIC_CASES))
def test_bad_input_is_refused_with_a_clear_message(call, error, fragments):
    refusal.assert_refused_twice(call, error, fragments)


@pytest.mark.parametrize(
    "metric, arrays, fragment",
    [
        (
            metrics.FrechetDistance,
            {"mu": np.zeros(3), "sigma": np.eye(3)},
            "3 features",
        ),
        (metrics.KernelDistance, {"features": np.zeros((4, 3))}, "3 columns"),
    ],
)
def test_real_statistics_of_another_width_are_refused(
    tmp_path, metric, arrays, fragment
):
    path = str(tmp_path / "real.npz")
    metrics.save_statistics(path, **arrays)
    refusal.assert_refused(
        lambda: metric(feature_extractor=None, num_features=2, real_statistics=path),
        ValueError,
        [fragment, "num_features=2", path],
    )
