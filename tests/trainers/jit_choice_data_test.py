"""`jit_compile="auto"` measures without touching the caller's data."""

import numpy as np
import tensorflow as tf

from keras_diffusion.trainers import jit_choice


def _shuffled(images):
    # A seeded shuffle that reshuffles each epoch: every iterator made of it
    # moves its seed on, so an extra one changes the run's epoch orders.
    return (
        tf.data.Dataset.from_tensor_slices(images)
        .shuffle(64, seed=3, reshuffle_each_iteration=True)
        .batch(8)  # an open batch dimension: (None, 8, 8, 1)
    )


def _epoch(dataset):
    return np.concatenate([np.asarray(b) for b in dataset])


def test_a_batch_of_an_open_batch_dimension_leaves_the_shuffle_alone(toy_images):
    measured, untouched = _shuffled(toy_images), _shuffled(toy_images)
    batch = jit_choice.sample_batch(measured, batch_size=8)
    assert batch.shape == (8, 8, 8, 1) and batch.dtype == np.float32
    for _ in range(2):  # two epochs: each order as if never measured
        np.testing.assert_array_equal(_epoch(measured), _epoch(untouched))


def test_labels_and_the_default_batch_size_come_from_the_spec(toy_images):
    labels = np.arange(len(toy_images)) % 3
    dataset = tf.data.Dataset.from_tensor_slices((toy_images, labels)).batch(5)
    images, batch_labels = jit_choice.sample_batch(dataset)
    assert images.shape == (32, 8, 8, 1) and batch_labels.shape == (32,)
    assert batch_labels.dtype == labels.dtype and not batch_labels.any()
