import numpy as np

from keras_diffusion.data import from_arrays
from keras_diffusion.data.ordered import EpochOrder


def _epoch(dataset, order, epoch, skip=0):
    order.epoch.assign(epoch)
    return [b.numpy() for b in dataset.epoch_batches(order, skip=skip)]


# 25 images, each a left-to-right ramp 10 k, 10 k + 1, ..., 10 k + 3 on every
# row: its smallest value names it, and the direction of the ramp tells a
# flipped image from an unflipped one.
RAMPS = (10 * np.arange(25)[:, None, None] + np.arange(4)).repeat(4, 1)
RAMPS = RAMPS.astype(np.uint8)


def _served(batches):
    """The (image, flipped) of each image in epoch batches, in order."""
    pixels = np.rint((np.concatenate(batches)[..., 0] + 1) * 127.5).astype(int)
    for image in pixels:
        row = image[0]
        assert (image == row).all() and abs(row[-1] - row[0]) == 3, image
    return pixels[:, 0].min(axis=1) // 10, pixels[:, 0, 0] > pixels[:, 0, -1]


def test_an_epoch_order_is_a_function_of_seed_and_epoch():
    dataset = from_arrays(RAMPS, batch_size=4, seed=3, flip=True)
    order = EpochOrder(3)
    first = _epoch(dataset, order, 1)
    assert [len(b) for b in first] == [4] * 6 + [1]
    _epoch(dataset, order, 0)
    again = _epoch(dataset, order, 1)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    # A resume skips batches, and the rest is unchanged.
    for a, b in zip(first[2:], _epoch(dataset, order, 1, skip=2), strict=True):
        np.testing.assert_array_equal(a, b)
    # A whole permutation each epoch, another one the next epoch.
    (ids, flips), (next_ids, next_flips) = (
        _served(_epoch(dataset, order, e)) for e in (1, 2)
    )
    for epoch_ids in (ids, next_ids):
        np.testing.assert_array_equal(np.sort(epoch_ids), np.arange(25))
    assert not np.array_equal(ids, next_ids)
    # Flips each epoch, of some images only, and other ones the next epoch.
    for epoch_flips in (flips, next_flips):
        assert 0 < epoch_flips.sum() < 25, epoch_flips
    assert not np.array_equal(flips, next_flips)


def test_the_flips_are_those_of_the_seed_and_epoch():
    def served(seed, epoch, flip=True):
        dataset = from_arrays(RAMPS, batch_size=4, seed=seed, flip=flip)
        return _served(_epoch(dataset, EpochOrder(seed), epoch))

    ids, flips = served(3, 1)
    # Another dataset and order of the same seed: the same images and flips.
    same_ids, same_flips = served(3, 1)
    np.testing.assert_array_equal(same_ids, ids)
    np.testing.assert_array_equal(same_flips, flips)
    # Another seed, the same epoch: other flips.
    assert not np.array_equal(served(4, 1)[1], flips)
    # No flip: the same order, nothing flipped.
    unflipped_ids, unflipped = served(3, 1, flip=False)
    np.testing.assert_array_equal(unflipped_ids, ids)
    assert not unflipped.any()


def test_replica_batches_cut_each_global_batch_as_the_replicas_share_it():
    # 26 distinct images in batches of 4: the last batch has 2, so 3 replicas
    # get 1, 1 and 0 of it. Flips on: a replica's slice must carry the flips
    # its images get in the global batch.
    images = np.arange(26 * 16, dtype=np.uint8).reshape(26, 4, 4) % 251
    dataset = from_arrays(images, batch_size=4, seed=5, flip=True)
    order = EpochOrder(5)
    order.epoch.assign(2)
    whole = [b.numpy() for b in dataset.epoch_batches(order)]
    for replicas in (2, 3):
        for first, count in ((0, replicas), (1, 1)):
            sliced = dataset.epoch_batches(order).replica_batches(
                replicas, first, count
            )
            got = [b.numpy() for b in sliced]
            assert len(got) == int(sliced.cardinality()) == len(whole) * count
            for i, batch in enumerate(whole):
                n = len(batch)
                sizes = [n // replicas + (r < n % replicas) for r in range(replicas)]
                starts = np.cumsum([0, *sizes])
                for j in range(count):
                    r = first + j
                    np.testing.assert_array_equal(
                        got[i * count + j], batch[starts[r] : starts[r + 1]]
                    )
    # A resume's skip applies to the global batches.
    rest = dataset.epoch_batches(order, skip=5).replica_batches(2, 0, 2)
    np.testing.assert_array_equal(
        np.concatenate([b.numpy() for b in rest]), np.concatenate(whole[5:])
    )
