import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.trainers import execution
from keras_diffusion.trainers.execution import AUTO_STEPS_PER_EXECUTION
from tests.denoisers import conv_denoiser


@pytest.fixture
def several_steps_in_graph_mode(monkeypatch):
    """Makes "auto" pick 8 a call in graph mode on this CPU too, as it does
    with XLA: graph mode keeps these tests fast, and a call runs its steps
    the same way in both."""
    monkeypatch.setattr(
        execution, "AUTO_STEPS_GRAPH_MODE_CPU", AUTO_STEPS_PER_EXECUTION
    )


def _model(**compile_kwargs):
    # A conv denoiser: these tests are about how `fit` calls the step, which
    # does not depend on the denoiser, and it traces in a fraction of a U-Net's
    # time.
    keras.utils.set_random_seed(5)
    model = DiffusionModel(conv_denoiser(), NoiseSchedule(100, "cosine"), seed=3)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3), jit_compile=False, **compile_kwargs
    )
    return model


def _weights(model):
    return [v.numpy() for v in model.denoiser.trainable_variables]


@pytest.mark.usefixtures("several_steps_in_graph_mode")
def test_auto_runs_several_steps_a_call_and_trains_the_same(toy_images):
    images = toy_images  # 64 images, 16 batches of 4: two calls of 8 steps
    auto = _model()
    one = _model(steps_per_execution=1)
    losses = [
        m.fit(images, epochs=2, batch_size=4, shuffle=False, verbose=0).history["loss"]
        for m in (auto, one)
    ]
    assert auto.steps_per_execution == AUTO_STEPS_PER_EXECUTION > 1
    assert one.steps_per_execution == 1
    # Every batch trained once an epoch, each step the same as one a call.
    assert int(auto.optimizer.iterations.numpy()) == 32
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for a, b in zip(_weights(auto), _weights(one), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.usefixtures("several_steps_in_graph_mode")
@pytest.mark.parametrize("steps_per_epoch, expected", [(6, 6), (12, 6), (7, 7), (9, 3)])
def test_auto_divides_steps_per_epoch(toy_images, steps_per_epoch, expected):
    model = _model()
    dataset = tf.data.Dataset.from_tensor_slices(toy_images).batch(8).repeat()
    model.fit(dataset, epochs=2, steps_per_epoch=steps_per_epoch, verbose=0)
    assert model.steps_per_execution == expected
    # No call runs past the epoch: exactly the steps asked for.
    assert int(model.optimizer.iterations.numpy()) == 2 * steps_per_epoch


def test_auto_is_one_step_a_call_in_graph_mode_on_a_cpu(toy_images):
    model = _model()  # graph mode, and no GPU here
    model.fit(toy_images[:48], epochs=1, batch_size=8, verbose=0)
    assert model.steps_per_execution == 1
    assert execution.auto_steps_per_execution(None, None, xla=True) == 8
    assert execution.auto_steps_per_execution(None, None, xla=False, gpu=True) == 8
    assert execution.auto_steps_per_execution(None, None, xla=False) == 1


def test_explicit_steps_per_execution_is_kept(toy_images):
    model = _model(steps_per_execution=3)
    model.fit(toy_images[:48], epochs=1, batch_size=8, verbose=0)
    assert model.steps_per_execution == 3


@pytest.mark.parametrize("value", [0, -2, "fast", 2.5, True, None])
def test_bad_steps_per_execution_raises_before_compiling(value):
    model = DiffusionModel(conv_denoiser(), NoiseSchedule(100, "cosine"))
    with pytest.raises((ValueError, TypeError), match="steps_per_execution"):
        model.compile(optimizer="adam", steps_per_execution=value)
    assert not model.compiled


@pytest.mark.usefixtures("several_steps_in_graph_mode")
def test_saved_model_keeps_auto(toy_images, tmp_path):
    model = _model()
    model.fit(toy_images[:16], epochs=1, batch_size=8, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_compile_config()["steps_per_execution"] == "auto"
    loaded.fit(toy_images, epochs=1, batch_size=8, verbose=0)
    assert loaded.steps_per_execution == AUTO_STEPS_PER_EXECUTION


def _progress_steps(output, total):
    """Every `N/total` step count Keras' progress bar printed."""
    return [int(n) for n in re.findall(rf"(\d+)/{total}\b", output)]


@pytest.mark.usefixtures("several_steps_in_graph_mode")
@pytest.mark.parametrize(
    "make_data, epoch_steps, expected",
    [
        # 14 batches, as 3,408 images at batch 256: 2 calls of 7, not 8 + 6.
        (lambda x: tf.data.Dataset.from_tensor_slices(x[:56]).batch(4), 14, 7),
        # An array in 11 batches of 6 (a prime count): one step a call.
        (lambda x: x, 11, 1),
    ],
    ids=["dataset-14-batches", "array-11-batches"],
)
def test_progress_bar_never_counts_past_the_epoch(
    toy_images, capsys, make_data, epoch_steps, expected
):
    model = _model()
    model.fit(make_data(toy_images), epochs=2, batch_size=6, verbose=1)
    steps = _progress_steps(capsys.readouterr().out, epoch_steps)
    assert model.steps_per_execution == expected
    assert steps and max(steps) == epoch_steps, steps
    assert int(model.optimizer.iterations.numpy()) == 2 * epoch_steps


def test_epoch_steps_of_each_kind_of_data(toy_images):
    dataset = tf.data.Dataset.from_tensor_slices(toy_images).batch(10)
    assert execution.epoch_steps(dataset) == 7
    assert execution.epoch_steps(dataset, steps_per_epoch=3) == 3
    assert execution.epoch_steps(dataset.repeat()) is None
    assert execution.epoch_steps(dataset.filter(lambda x: True)) is None
    assert execution.epoch_steps(toy_images) == 2  # Keras' batch size 32
    assert execution.epoch_steps(toy_images, batch_size=6) == 11
    # Keras trains on the first floor(64 * 0.75) = 48 images.
    assert execution.epoch_steps(toy_images, 8, validation_split=0.25) == 6


class _EveryStep(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)


@pytest.mark.usefixtures("several_steps_in_graph_mode")
def test_a_callback_that_needs_every_step_gets_one_step_a_call(toy_images):
    model = _model()
    every_step = _EveryStep()
    model.fit(
        toy_images[:48], epochs=1, batch_size=8, verbose=0, callbacks=[every_step]
    )
    assert model.steps_per_execution == 1
    assert every_step.batches == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "callback, expected",
    [
        (keras.callbacks.EarlyStopping(monitor="loss"), AUTO_STEPS_PER_EXECUTION),
        (keras.callbacks.TerminateOnNaN(), AUTO_STEPS_PER_EXECUTION),
        (keras.callbacks.ModelCheckpoint("{dir}/m.keras"), AUTO_STEPS_PER_EXECUTION),
        (keras.callbacks.ModelCheckpoint("{dir}/m.keras", save_freq=2), 1),
        (keras.callbacks.TensorBoard("{dir}/tb", update_freq="batch"), 1),
    ],
    ids=["early-stopping", "nan", "checkpoint-epoch", "checkpoint-steps", "tb-batch"],
)
def test_auto_keeps_several_steps_only_for_callbacks_that_allow_it(
    callback, expected, tmp_path
):
    from keras_diffusion.trainers.execution import auto_steps_per_execution

    for name in ("filepath", "log_dir"):
        if isinstance(getattr(callback, name, None), str):
            setattr(callback, name, getattr(callback, name).format(dir=tmp_path))
    assert auto_steps_per_execution(None, [callback]) == expected
    assert auto_steps_per_execution(None, keras.callbacks.CallbackList([callback])) == (
        expected
    )
