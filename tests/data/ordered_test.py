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
