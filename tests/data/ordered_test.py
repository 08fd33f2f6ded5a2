import numpy as np

from keras_diffusion.data import from_arrays
from keras_diffusion.data.ordered import EpochOrder


def _epoch(dataset, order, epoch, skip=0):
    order.epoch.assign(epoch)
    return [b.numpy() for b in dataset.epoch_batches(order, skip=skip)]


def test_an_epoch_order_is_a_function_of_seed_and_epoch():
    # Each image a distinct constant: its value names it.
    images = np.repeat(np.arange(0, 250, 10, dtype=np.uint8), 16).reshape(25, 4, 4)
    dataset = from_arrays(images, batch_size=4, seed=3, flip=True)
    order = EpochOrder(3)
    first = _epoch(dataset, order, 1)
    _epoch(dataset, order, 0)
    again = _epoch(dataset, order, 1)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    # A resume skips batches, and the rest is unchanged.
    for a, b in zip(first[2:], _epoch(dataset, order, 1, skip=2), strict=True):
        np.testing.assert_array_equal(a, b)
    # A whole permutation each epoch, another one the next epoch.
    seen = [np.concatenate(_epoch(dataset, order, e))[:, 0, 0, 0] for e in (1, 2)]
    expected = np.sort((images[:, 0, 0] / 127.5 - 1).astype(np.float32))
    for values in seen:
        np.testing.assert_allclose(np.sort(values), expected, atol=1e-6)
    assert not np.array_equal(seen[0], seen[1])
    assert [len(b) for b in first] == [4] * 6 + [1]


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
