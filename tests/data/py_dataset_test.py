import keras
import numpy as np
import pytest

from keras_diffusion.data import ArrayPyDataset


def _ids(data):
    return np.concatenate([data[i][1] for i in range(len(data))]).tolist()


def test_batches_are_scaled_with_a_partial_last_batch():
    images = np.stack([np.full((4, 4), v, np.uint8) for v in (0, 255, 51, 0, 255)])
    data = ArrayPyDataset(images, batch_size=2, shuffle=False)
    assert isinstance(data, keras.utils.PyDataset)
    assert len(data) == 3
    batches = [data[i] for i in range(3)]
    assert [b.shape for b in batches] == [(2, 4, 4, 1), (2, 4, 4, 1), (1, 4, 4, 1)]
    assert all(b.dtype == np.float32 for b in batches)
    np.testing.assert_allclose(
        [b[i, 0, 0, 0] for b in batches for i in range(len(b))],
        [-1.0, 1.0, 51 / 127.5 - 1, -1.0, 1.0],
        atol=1e-6,
    )
    assert len(ArrayPyDataset(images, batch_size=2, drop_remainder=True)) == 2
    with pytest.raises(IndexError):
        data[3]


def test_shuffle_and_flip_are_reproducible_and_change_each_epoch():
    images = np.random.default_rng(0).random((20, 3, 5, 1)).astype(np.float32)

    def make():
        return ArrayPyDataset(images, np.arange(20), batch_size=6, flip=True, seed=4)

    data = make()
    first = _ids(data)
    assert sorted(first) == list(range(20)) and first != list(range(20))
    x, y = data[0]
    for image, i in zip(x, y, strict=True):
        expected = images[i] * 2 - 1
        assert np.allclose(image, expected) or np.allclose(image, expected[:, ::-1])
    assert _ids(make()) == first
    np.testing.assert_array_equal(make()[0][0], x)
    data.on_epoch_end()
    assert _ids(data) != first


def test_fit_runs_on_the_py_dataset():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 64)
    images = (labels[:, None, None] * 200 + rng.integers(0, 50, (64, 8, 8))).astype(
        np.uint8
    )
    model = keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(2)]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    data = ArrayPyDataset(images, labels, batch_size=16, seed=0)
    history = model.fit(data, epochs=3, verbose=0)
    assert history.history["accuracy"][-1] > 0.9


BAD_INPUT = [
    ({"batch_size": 0}, ValueError, "batch_size=0"),
    ({"images": np.zeros((0, 4, 4), np.uint8)}, ValueError, "empty"),
    ({"images": np.zeros((4, 4), np.uint8)}, ValueError, "shape=.4, 4."),
    ({"labels": np.arange(3)}, ValueError, "`labels`"),
    ({"labels": -np.arange(4)}, ValueError, "min=-3"),
    ({"seed": 1.5}, TypeError, "seed=1.5"),
]


def test_bad_input():
    for kwargs, error, message in BAD_INPUT:
        with pytest.raises(error, match=message):
            ArrayPyDataset(**{"images": np.zeros((4, 4, 4), np.uint8), **kwargs})
