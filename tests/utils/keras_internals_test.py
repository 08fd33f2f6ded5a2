"""The private Keras behaviour `keras_diffusion.utils.keras_internals` relies on.

Each test names the entry it checks, so that a Keras release that changed
one fails here, loudly, rather than somewhere downstream in silence.
"""

import inspect
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel
from keras_diffusion.utils import keras_internals


def test_keras_release_is_one_the_internals_were_checked_with():
    version = keras_internals.keras_version()
    assert version in keras_internals.KNOWN_KERAS_VERSIONS, (
        f"Keras {keras.__version__} is not among the releases whose private "
        f"behaviour keras_diffusion.utils.keras_internals was checked with "
        f"({', '.join(keras_internals.KNOWN_KERAS_VERSIONS)}): run this file "
        "and, once every test passes, add the release to KNOWN_KERAS_VERSIONS."
    )


def test_keras_still_has_the_symbolic_build_hook_diffusion_model_replaces():
    method = getattr(keras.Model, keras_internals.SYMBOLIC_BUILD_METHOD, None)
    assert method is not None, (
        f"keras.Model.{keras_internals.SYMBOLIC_BUILD_METHOD} is gone: "
        "DiffusionModel's override no longer runs"
    )
    assert list(inspect.signature(method).parameters) == [
        "self",
        "iterator",
        "data_batch",
    ]
    own = getattr(DiffusionModel, keras_internals.SYMBOLIC_BUILD_METHOD)
    assert own is not method and own(None) is None


def test_backup_and_restore_writes_the_files_a_run_folder_reads(tmp_path):
    x_in = keras.Input((2,))
    model = keras.Model(x_in, keras.layers.Dense(1)(x_in))
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(
        str(tmp_path), delete_checkpoint=False, double_checkpoint=True
    )
    x = np.zeros((4, 2), "float32")
    model.fit(x, x[:, :1], epochs=2, verbose=0, callbacks=[backup])
    names = set(os.listdir(tmp_path))
    suffix = keras_internals.BACKUP_PREVIOUS_SUFFIX
    for name in (
        keras_internals.BACKUP_WEIGHTS_FILE,
        keras_internals.BACKUP_METADATA_FILE,
    ):
        assert name in names and name + suffix in names, sorted(names)


def test_tensorboard_profiling_is_read_from_its_profile_batch(tmp_path):
    def profiles(profile_batch):
        callback = keras.callbacks.TensorBoard(
            str(tmp_path), profile_batch=profile_batch
        )
        return keras_internals.tensorboard_profiles(callback)

    assert not profiles(0)
    assert profiles(3)
    assert profiles((2, 4))


def test_dataset_graph_names_its_ops():
    dataset = tf.data.Dataset.range(4).map(lambda x: x * 2).batch(2)
    ops = {node.op for node in keras_internals.dataset_graph_def(dataset).node}
    assert {"RangeDataset", "MapDataset", "BatchDatasetV2"} <= ops, sorted(ops)


def test_seed_generators_finds_each_dropout_at_any_depth():
    inner = keras.Sequential([keras.layers.Dense(2), keras.layers.Dropout(0.5)])
    x = keras.Input((2,))
    model = keras.Model(x, keras.layers.Dropout(0.2)(inner(x)))
    found = keras_internals.seed_generators(model)
    assert len(found) == 2
    assert all(isinstance(g, keras.random.SeedGenerator) for g in found)


def test_sublayers_reaches_the_projections_inside_an_attention_layer():
    x = keras.Input((4, 8))
    model = keras.Model(x, keras.layers.MultiHeadAttention(1, 8)(x, x))
    dense = [s for s in keras_internals.sublayers(model) if hasattr(s, "kernel")]
    assert len(dense) == 4  # query, key, value, output


@pytest.mark.parametrize(
    "layer, shape",
    [
        (keras.layers.Dense(3), (2, 4)),
        (keras.layers.Conv2D(3, 3), (1, 5, 5, 2)),
        (keras.layers.EinsumDense("ab,bc->ac", output_shape=3), (2, 4)),
    ],
)
def test_lora_base_kernel_is_the_frozen_kernel_under_the_merged_one(layer, shape):
    layer.build(shape)
    layer.enable_lora(2)
    layer.lora_kernel_b.assign(np.ones(layer.lora_kernel_b.shape, "float32"))
    base = keras_internals.lora_base_kernel(layer)
    assert isinstance(base, keras.Variable) and not base.trainable
    delta = keras.ops.matmul(layer.lora_kernel_a, layer.lora_kernel_b)
    np.testing.assert_allclose(layer.kernel, base.numpy() + delta.numpy(), atol=1e-6)
    # What the entry exists for: Keras' own load zeroes both factors.
    store = {}
    layer.save_own_variables(store)
    layer.load_own_variables(store)
    assert not np.any(layer.lora_kernel_a.numpy())
