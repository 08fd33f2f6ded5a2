import re

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.data import from_arrays


def _ids(dataset):
    """The label ids of one epoch, in order."""
    return np.concatenate([labels.numpy() for _, labels in dataset]).tolist()


def test_uint8_scales_to_minus_one_one():
    images = np.array([0, 51, 128, 255], dtype=np.uint8).reshape(4, 1, 1)
    (batch,) = list(from_arrays(images, batch_size=4, shuffle=False))
    assert batch.dtype == tf.float32
    assert batch.shape == (4, 1, 1, 1)
    np.testing.assert_allclose(
        batch.numpy().ravel(), [-1.0, 51 / 127.5 - 1, 128 / 127.5 - 1, 1.0], atol=1e-6
    )


@pytest.mark.parametrize(
    "values, value_range, expected",
    [
        ([0.0, 0.25, 1.0], None, [-1.0, -0.5, 1.0]),  # floats in [0, 1]
        ([-1.0, 0.5, 1.0], None, [-1.0, 0.5, 1.0]),  # floats in [-1, 1]
        ([0.0, 0.5, 1.0], (-1, 1), [0.0, 0.5, 1.0]),  # stated range wins
        ([0, 4, 16], (0, 16), [-1.0, -0.5, 1.0]),  # int64 needs a range
    ],
)
def test_value_ranges(values, value_range, expected):
    images = np.array(values).reshape(3, 1, 1, 1)
    (batch,) = list(
        from_arrays(images, batch_size=3, shuffle=False, value_range=value_range)
    )
    np.testing.assert_allclose(batch.numpy().ravel(), expected, atol=1e-6)


def test_shapes_labels_and_partial_last_batch():
    images = np.zeros((10, 6, 5, 3), np.uint8)
    labels = np.arange(10, dtype=np.int64)[:, None]  # (N, 1), as cifar10's
    batches = list(from_arrays(images, labels, batch_size=4, shuffle=False))
    assert [x.shape for x, _ in batches] == [(4, 6, 5, 3), (4, 6, 5, 3), (2, 6, 5, 3)]
    assert all(y.dtype == tf.int32 for _, y in batches)
    assert _ids(batches) == list(range(10))
    dropped = from_arrays(images, labels, batch_size=4, drop_remainder=True)
    assert [x.shape[0] for x, _ in dropped] == [4, 4]
    assert dropped.element_spec[0].shape == (4, 6, 5, 3)


def test_grayscale_gets_a_channel_and_resize():
    images = np.full((3, 8, 8), 255, np.uint8)
    (batch,) = list(from_arrays(images, batch_size=3, image_size=(16, 12)))
    assert batch.shape == (3, 16, 12, 1)
    np.testing.assert_allclose(batch.numpy(), 1.0, atol=1e-6)


def test_shuffle_is_reproducible_with_a_seed():
    images = np.zeros((32, 2, 2, 1), np.uint8)
    labels = np.arange(32)

    def make(seed, shuffle=True):
        return from_arrays(images, labels, batch_size=5, shuffle=shuffle, seed=seed)

    first = make(7)
    epoch_1, epoch_2 = _ids(first), _ids(first)
    assert sorted(epoch_1) == list(range(32))
    assert epoch_1 != list(range(32))
    assert epoch_2 != epoch_1  # reshuffled every epoch
    again = make(7)
    assert (_ids(again), _ids(again)) == (epoch_1, epoch_2)
    assert _ids(make(8)) != epoch_1
    assert _ids(make(7, shuffle=False)) == list(range(32))


def test_flip_mirrors_some_images_reproducibly():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (64, 4, 5, 3), dtype=np.uint8)
    scaled = images / 127.5 - 1.0

    def flipped_mask(dataset):
        mask = []
        for x, y in dataset:
            for image, i in zip(x.numpy(), y.numpy(), strict=True):
                if np.allclose(image, scaled[i], atol=1e-5):
                    mask.append(False)
                else:
                    np.testing.assert_allclose(image, scaled[i][:, ::-1], atol=1e-5)
                    mask.append(True)
        return mask

    dataset = from_arrays(images, np.arange(64), batch_size=16, flip=True, seed=3)
    mask = flipped_mask(dataset)
    assert 10 < sum(mask) < 54
    second_epoch = flipped_mask(dataset)
    assert second_epoch != mask
    replay = from_arrays(images, np.arange(64), batch_size=16, flip=True, seed=3)
    assert flipped_mask(replay) == mask
    plain = from_arrays(images, np.arange(64), batch_size=16, seed=3)
    assert not any(flipped_mask(plain))


@pytest.mark.parametrize("as_array", [False, True])
def test_captions_follow_their_images_shuffled_flipped_and_epoch_ordered(as_array):
    from keras_diffusion.data.ordered import EpochOrder

    images = np.arange(10, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), "uint8")
    texts = [f"image {i}" for i in range(10)]
    texts = np.array(texts) if as_array else texts
    dataset = from_arrays(images, texts, batch_size=4, flip=True, seed=0)
    assert dataset.captions == [f"image {i}" for i in range(10)]

    def pairs(batches):
        found = []
        for x, captions in batches:
            assert captions.dtype == tf.string and captions.shape == x.shape[:1]
            ids = np.round((x.numpy()[:, 0, 0, 0] + 1) * 127.5).astype(int)
            found += [
                (f"image {i}", c.decode())
                for i, c in zip(ids, captions.numpy(), strict=True)
            ]
        return found

    ordered = dataset.epoch_batches(EpochOrder(0))
    # Two workers' shares of each batch (tf.distribute), flips included.
    shares = pairs(ordered.replica_batches(2, 0, 1)) + pairs(
        ordered.replica_batches(2, 1, 1)
    )
    epochs = [pairs(dataset), pairs(dataset), pairs(ordered), shares]
    for found in epochs:
        assert sorted(found) == sorted((t, t) for t in dataset.captions)
        assert all(image == caption for image, caption in found)
    assert epochs[0] != epochs[1]


def test_cache_to_file(tmp_path):
    images = np.arange(6, dtype=np.uint8).reshape(6, 1, 1)
    dataset = from_arrays(images, batch_size=6, cache=str(tmp_path / "c"))
    assert sorted(next(iter(dataset)).numpy().ravel().tolist()) == sorted(
        (np.arange(6) / 127.5 - 1.0).astype(np.float32).tolist()
    )


IMAGES = np.zeros((4, 8, 8), np.uint8)


BAD_INPUT = [
    ({"batch_size": 0}, ValueError, "`batch_size`.*batch_size=0"),
    ({"batch_size": -3}, ValueError, "`batch_size`.*batch_size=-3"),
    ({"batch_size": 2.5}, TypeError, "`batch_size`.*batch_size=2.5"),
    ({"batch_size": True}, TypeError, "`batch_size`.*batch_size=True"),
    ({"images": np.zeros((0, 8, 8), np.uint8)}, ValueError, "empty.*(0, 8, 8)"),
    ({"images": np.zeros((8, 8), np.uint8)}, ValueError, "`images`.*(8, 8)"),
    (
        {"images": np.zeros((2, 2, 8, 8, 1))},
        ValueError,
        "`images`.*(2, 2, 8, 8, 1)",
    ),
    ({"images": np.zeros((2, 3, 8, 8))}, ValueError, "channels last.*(2, 3, 8, 8)"),
    ({"images": np.array([["a"]])}, TypeError, "`images`.*dtype=<U1"),
    ({"images": np.full((2, 4, 4), 3.0)}, ValueError, "`value_range`.*max=3"),
    ({"images": np.full((2, 4, 4), 7)}, ValueError, "`value_range`.*int64"),
    ({"value_range": (1, 0)}, ValueError, "`value_range`.*value_range=(1, 0)"),
    (
        {"images": np.full((2, 4, 4), 255, np.uint8), "value_range": (0, 100)},
        ValueError,
        "`value_range`.*[255, 255].*(0.0, 100.0)",
    ),
    ({"labels": [0, 1, 2]}, ValueError, "`labels`.*(4,).*shape=(3,)"),
    ({"labels": [0, 1, -2, 3]}, ValueError, "`labels`.*min=-2"),
    ({"labels": [0.0, 1.0, 2.0, 3.0]}, TypeError, "`labels`.*dtype=float64"),
    ({"labels": ["a", "b"]}, ValueError, "`labels` (captions).*(4,).*shape=(2,)"),
    ({"labels": ["a", 1, "c", "d"]}, TypeError, "`labels` (captions).*labels[1]=1"),
    ({"image_size": 0}, ValueError, "`image_size`.*image_size=0"),
    ({"image_size": (8,)}, ValueError, "`image_size`.*image_size=(8,)"),
    ({"seed": "1"}, TypeError, "`seed`.*seed='1'"),
    ({"cache": 1}, TypeError, "`cache`.*cache=1"),
]


def test_bad_input():
    """One test for the table: each case fails before any work is done."""
    for kwargs, error, message in BAD_INPUT:
        pattern = ".*".join(re.escape(part) for part in message.split(".*"))
        with pytest.raises(error, match=pattern):
            from_arrays(**{"images": IMAGES, **kwargs})


def test_in_memory_pipelines_turn_tf_data_autotuning_off():
    # Nothing to tune for arrays already in memory; the thread costs time.
    from keras_diffusion.data import load_digits

    images = np.zeros((4, 8, 8, 1), np.uint8)
    assert from_arrays(images, batch_size=2).options().autotune.enabled is False
    assert load_digits(batch_size=8).options().autotune.enabled is False
