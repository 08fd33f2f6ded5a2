import gzip
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_diffusion.data import (
    DatasetDownloadError,
    from_keras_dataset,
    load_keras_arrays,
)

REPO = pathlib.Path(__file__).resolve().parents[2]


def _write_fake_fashion_mnist(datasets_dir, images, labels):
    """Writes the four idx .gz files keras' fashion_mnist.load_data reads."""
    folder = datasets_dir / "fashion-mnist"
    folder.mkdir(parents=True)
    for split in ("train", "t10k"):
        with gzip.open(folder / f"{split}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(b"\0" * 8 + labels.tobytes())
        with gzip.open(folder / f"{split}-images-idx3-ubyte.gz", "wb") as f:
            f.write(b"\0" * 16 + images.tobytes())


def test_real_keras_loader_offline_with_a_cached_file(tmp_path):
    """keras reads KERAS_HOME at import, so this runs in a fresh process."""
    images = np.zeros((5, 28, 28), np.uint8)
    images[:, :, :14] = 255
    labels = np.array([3, 1, 4, 1, 5], np.uint8)
    _write_fake_fashion_mnist(tmp_path / "keras_home" / "datasets", images, labels)
    script = textwrap.dedent(
        """
        import json
        from keras_diffusion.data import DatasetDownloadError, from_keras_dataset

        ds = from_keras_dataset(
            "fashion_mnist", batch_size=8, image_size=32, with_labels=True,
            shuffle=False,
        )
        (x, y), = list(ds)
        result = {"shape": list(x.shape), "labels": y.numpy().tolist(),
                  "left": float(x[:, :, :12].numpy().min()),
                  "right": float(x[:, :, 20:].numpy().max()),
                  "classes": ds.class_names}
        try:
            from_keras_dataset("mnist")
        except DatasetDownloadError as error:
            result["error"] = str(error)
        print("RESULT" + json.dumps(result))
        """
    )
    unreachable = "http://127.0.0.1:9"  # refused at once: no network, no wait
    env = {
        **os.environ,
        "KERAS_HOME": str(tmp_path / "keras_home"),
        "PYTHONPATH": str(REPO),
        "http_proxy": unreachable,
        "https_proxy": unreachable,
        "HTTP_PROXY": unreachable,
        "HTTPS_PROXY": unreachable,
        "no_proxy": "",
        "NO_PROXY": "",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    run = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT", 1)[1])
    assert result["shape"] == [5, 32, 32, 1]
    assert result["labels"] == [3, 1, 4, 1, 5]
    assert result["left"] == pytest.approx(1.0) and result["right"] == -1.0
    assert result["classes"][3] == "Dress"
    message = result["error"]
    assert "'mnist'" in message and "no network" in message
    assert "path=" in message
    assert (
        os.path.join(str(tmp_path / "keras_home"), "datasets", "mnist.npz") in message
    )


def test_local_npz_path(tmp_path):
    path = tmp_path / "mnist.npz"
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (7, 28, 28), dtype=np.uint8),
        y_train=np.arange(7, dtype=np.uint8),
        x_test=np.full((2, 28, 28), 255, np.uint8),
        y_test=np.array([9, 8], np.uint8),
    )
    train = from_keras_dataset("mnist", 4, path=path, image_size=32, seed=0)
    assert [x.shape for x in train] == [(4, 32, 32, 1), (3, 32, 32, 1)]
    test = from_keras_dataset(
        "mnist", 4, split="test", path=path, with_labels=True, shuffle=False
    )
    ((x, y),) = list(test)
    assert x.shape == (2, 28, 28, 1)
    np.testing.assert_allclose(x.numpy(), 1.0)
    assert y.numpy().tolist() == [9, 8]
    assert test.class_names == [str(i) for i in range(10)]


def test_download_error_is_a_runtime_error():
    assert issubclass(DatasetDownloadError, RuntimeError)


def _write_idx(path, array):
    """`array` (uint8) as an idx file: two zero bytes, the type (8: bytes),
    the rank, each dimension big-endian, then the values."""
    header = bytes([0, 0, 8, array.ndim])
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + array.tobytes())


def test_a_folder_of_the_mnist_idx_files_reads_as_keras_npz_does(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "train": (
            rng.integers(0, 256, (5, 28, 28), np.uint8),
            np.arange(5, dtype=np.uint8),
        ),
        "test": (
            rng.integers(0, 256, (3, 28, 28), np.uint8),
            np.array([7, 8, 9], np.uint8),
        ),
    }
    # The original download's names: train gzipped, t10k not.
    for split, prefix, ext in (("train", "train", ".gz"), ("test", "t10k", "")):
        images, labels = arrays[split]
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte{ext}", images)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte{ext}", labels)
    for split, (images, labels) in arrays.items():
        got_images, got_labels = load_keras_arrays("mnist", split, path=tmp_path)
        np.testing.assert_array_equal(got_images, images)
        np.testing.assert_array_equal(got_labels, labels)
    ((x, y),) = list(
        from_keras_dataset("mnist", 8, path=tmp_path, with_labels=True, shuffle=False)
    )
    assert x.shape == (5, 28, 28, 1) and y.numpy().tolist() == [0, 1, 2, 3, 4]


def test_bad_input(tmp_path):
    pngs = tmp_path / "pngs"
    pngs.mkdir()
    (pngs / "a.png").write_bytes(b"")
    np.savez(tmp_path / "other.npz", images=np.zeros((2, 28, 28)))
    bad = [
        ({"name": "imagenet"}, "`name`.*name='imagenet'"),
        ({"name": "mnist", "split": "val"}, "`split`.*split='val'"),
        ({"name": "mnist", "batch_size": 0}, "`batch_size`.*batch_size=0"),
        (
            {"name": "mnist", "path": "/no/such.npz"},
            "`path`.*path='/no/such.npz', which does not exist",
        ),
        (
            {"name": "mnist", "path": str(pngs)},
            "`path` must be an .npz with arrays x_train.*a folder of the four "
            "idx files.*a folder without the idx files; it holds a.png",
        ),
        (
            {"name": "mnist", "path": str(tmp_path / "other.npz")},
            r"an .npz without x_train, y_train, x_test, y_test; it has \['images'\]",
        ),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            from_keras_dataset(**kwargs)
