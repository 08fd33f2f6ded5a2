"""`fit`'s input: tf.data's autotuning off where the user has not chosen."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.data.pipeline import without_autotune
from keras_diffusion.trainers import fit_input


def _autotune(dataset):
    return dataset.options().autotune.enabled


def test_a_dataset_without_an_autotune_choice_gets_it_off():
    dataset = tf.data.Dataset.range(10).batch(4)
    dataset.num_examples = 10
    prepared = without_autotune(dataset)
    assert _autotune(dataset) is None
    assert _autotune(prepared) is False
    assert prepared.num_examples == 10
    assert [b.numpy().tolist() for b in prepared] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]


@pytest.mark.parametrize("choice", [True, False])
def test_the_users_autotune_choice_is_kept(choice):
    options = tf.data.Options()
    options.autotune.enabled = choice
    dataset = tf.data.Dataset.range(4).with_options(options)
    assert without_autotune(dataset) is dataset


def test_arrays_become_the_batches_keras_would_make(make_unet):
    model = DiffusionModel(make_unet(num_classes=3))
    images = np.arange(10 * 8 * 8, dtype="float32").reshape(10, 8, 8, 1) / 640
    labels = np.arange(10) % 3
    kwargs = {"batch_size": 4, "shuffle": False, "epochs": 2}
    x, y, rest = fit_input.prepare(model, images, labels, kwargs)
    assert y is None and rest == {"shuffle": False, "epochs": 2}
    assert kwargs["batch_size"] == 4  # the caller's dict is not changed
    assert _autotune(x) is False
    batches = list(x)
    assert [len(b[0]) for b in batches] == [4, 4, 2]  # the last one partial
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), images)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), labels)


def test_shuffled_arrays_are_a_new_permutation_each_epoch(make_unet):
    model = DiffusionModel(make_unet())
    images = np.arange(64, dtype="float32").reshape(64, 1, 1, 1) * np.ones((1, 8, 8, 1))
    x, _, _ = fit_input.prepare(model, images.astype("float32"), None, {})
    orders = [np.concatenate([b[:, 0, 0, 0] for b in x]) for _ in range(2)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(64))  # every image once
    assert orders[0].tolist() != orders[1].tolist()


@pytest.mark.parametrize(
    "option",
    [{"validation_split": 0.25}, {"sample_weight": np.ones(16)}, {"shuffle": "batch"}],
)
def test_arrays_keep_keras_path_for_what_only_it_does(make_unet, toy_images, option):
    model = DiffusionModel(make_unet())
    images = toy_images[:16]
    x, y, kwargs = fit_input.prepare(model, images, None, option)
    assert x is images and y is None  # handed on as given, not a dataset
    assert kwargs == option


def test_fit_hands_keras_the_prepared_dataset(make_unet, toy_images, monkeypatch):
    seen = {}

    def keras_fit(self, x=None, y=None, **kwargs):
        seen.update(x=x, y=y, kwargs=kwargs)

    monkeypatch.setattr(keras.Model, "fit", keras_fit)
    model = DiffusionModel(make_unet(), NoiseSchedule(100))
    model.compile(optimizer="adam", jit_compile=False)
    dataset = tf.data.Dataset.from_tensor_slices(toy_images).batch(16)
    model.fit(dataset, epochs=1, validation_data=dataset.take(1))
    assert _autotune(seen["x"]) is False
    assert _autotune(seen["kwargs"]["validation_data"]) is False
    model.fit(toy_images, batch_size=16, epochs=1)
    assert isinstance(seen["x"], tf.data.Dataset) and _autotune(seen["x"]) is False
    assert "batch_size" not in seen["kwargs"]
