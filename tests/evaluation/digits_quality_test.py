import numpy as np
import pytest

pytest.importorskip("sklearn")

from keras_diffusion.data import load_digits_arrays  # noqa: E402
from keras_diffusion.evaluation import digits_quality  # noqa: E402

N = 300


@pytest.fixture(scope="module")
def quality():
    return digits_quality.DigitsQuality(num_samples=N)


@pytest.fixture(scope="module")
def half_a():
    images, labels = load_digits_arrays(16)
    order = np.random.default_rng(0).permutation(len(images))
    # The last N of half A: real digits other than the floor's first N.
    index = order[: len(order) // 2][-N:]
    return images[index], labels[index]


def test_real_digits_score_about_one_and_as_confident_as_real(quality, half_a):
    images, labels = half_a
    score = quality.score(images, labels)
    assert 0.1 < quality.floor < 0.3
    assert 0.6 < score["fd_ratio"] < 1.6
    assert 0.9 < score["confident_ratio"] < 1.15
    assert score["classes"] == 10
    assert score["agreement"] > 0.95


def test_noise_blur_and_one_class_score_far_from_real(quality, half_a):
    images, labels = half_a
    noise = np.random.default_rng(1).normal(0, 0.4, images.shape)
    noisy = np.clip(images + noise, -1, 1)  # as generate clips
    blurred = np.broadcast_to(images.mean(0), images.shape)
    ones = np.repeat(images[labels == 1][:1], N, axis=0)
    assert 1.5 < quality.score(noisy)["fd_ratio"] < 3.0
    assert quality.score(blurred)["fd_ratio"] > 20
    one_class = quality.score(ones)
    assert one_class["fd_ratio"] > 20
    assert one_class["classes"] == 1


def test_area_downsampling_keeps_the_native_digits(quality):
    # 8x8 -> bilinear 16x16 -> 2x2 means is the 8x8 digit, slightly blurred
    # (hence real digits take the same path as samples).
    native, _ = load_digits_arrays(8)
    upsampled, _ = load_digits_arrays(16)
    round_trip = quality.downsample(upsampled).reshape(native.shape)
    assert np.corrcoef(round_trip.ravel(), native.ravel())[0, 1] > 0.95
    assert 0.05 < np.abs(round_trip - native).mean() < 0.2


def test_errors_name_the_argument(quality, half_a):
    with pytest.raises(ValueError, match="num_samples=300"):
        quality.score(half_a[0][:10])
    with pytest.raises(ValueError, match="image_size"):
        digits_quality.DigitsQuality(image_size=12)
    with pytest.raises(ValueError, match="num_samples"):
        digits_quality.DigitsQuality(num_samples=2000)
    with pytest.raises(ValueError, match="shape"):
        quality.score(np.zeros((N, 8, 8, 1)))
