import numpy as np
import pytest
from sklearn import datasets

from keras_diffusion.data import load_digits, load_digits_arrays


def test_digits_dataset_shapes_range_and_classes():
    dataset = load_digits(batch_size=500, with_labels=True, seed=0)
    assert dataset.class_names == [str(i) for i in range(10)]
    batches = list(dataset)
    assert [x.shape for x, _ in batches] == [(500, 16, 16, 1)] * 3 + [(297, 16, 16, 1)]
    images = np.concatenate([x.numpy() for x, _ in batches])
    labels = np.concatenate([y.numpy() for _, y in batches])
    assert images.dtype == np.float32 and labels.dtype == np.int32
    assert images.min() == -1.0 and images.max() == 1.0
    assert (
        np.bincount(labels).tolist()
        == np.bincount(datasets.load_digits().target).tolist()
    )


def test_shipped_copy_matches_scikit_learn():
    reference = datasets.load_digits()
    images, labels = load_digits_arrays(image_size=8)
    np.testing.assert_allclose(images[..., 0], reference.images / 8.0 - 1.0, atol=1e-6)
    np.testing.assert_array_equal(labels, reference.target)


def test_upsampled_digits_keep_their_content():
    small, _ = load_digits_arrays(image_size=8)
    large, labels = load_digits_arrays()
    assert large.shape == (1797, 16, 16, 1) and labels.shape == (1797,)
    assert large.min() == -1.0 and large.max() == 1.0
    # Averaging 2x2 blocks of the 16x16 image gives back (a smoothed) 8x8 one.
    pooled = large.reshape(1797, 8, 2, 8, 2).mean(axis=(2, 4))
    assert np.corrcoef(pooled.ravel(), small.ravel())[0, 1] > 0.95


def test_bad_input():
    with pytest.raises(ValueError, match="image_size=-1"):
        load_digits(image_size=-1)
    with pytest.raises(ValueError, match="batch_size=0"):
        load_digits(batch_size=0)
