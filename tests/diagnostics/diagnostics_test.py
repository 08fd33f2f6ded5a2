import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, diagnostics
from tests.denoisers import conv_denoiser


@pytest.fixture
def tiny_model():
    # Diagnostics are model-agnostic; a two-layer denoiser traces in well
    # under a second, where a U-Net takes several.
    model = DiffusionModel(conv_denoiser(width=4), seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


def _fast_dataset(images):
    return (
        tf.data.Dataset.from_tensor_slices(images)
        .batch(16, drop_remainder=True)
        .cache()
        .repeat()
        .prefetch(tf.data.AUTOTUNE)
    )


def _slow_dataset(images, seconds=0.1):
    def sleep(x):
        time.sleep(seconds)
        return x

    def slow(x):
        y = tf.py_function(sleep, [x], tf.float32)
        return tf.ensure_shape(y, x.shape)

    return tf.data.Dataset.from_tensor_slices(images).batch(16).map(slow)


def test_fast_pipeline_is_compute_bound(tiny_model, toy_images):
    report = diagnostics.diagnose(
        tiny_model, _fast_dataset(toy_images), steps=6, verbose=False
    )
    assert report.verdict == "compute-bound"
    assert report.traces_after_warmup == 0
    assert report.batch_size == 16
    assert report.input_images_per_sec > report.step_images_per_sec
    assert report.environment["gpu_present"] is False
    assert report.environment["dtype_policy"] == "float32"


def test_slow_pipeline_is_input_bound_with_fixes(tiny_model, toy_images):
    before = [v.numpy().copy() for v in tiny_model.denoiser.trainable_variables]
    report = diagnostics.diagnose(
        tiny_model, _slow_dataset(toy_images), steps=3, warmup=1, verbose=False
    )
    assert report.verdict == "input-bound"
    fixes = " ".join(report.fixes)
    for fix in ("py_function", "cache", "parallel map", "prefetch"):
        assert fix in fixes
    # restore_state=True: diagnosing does not train the model.
    after = [v.numpy() for v in tiny_model.denoiser.trainable_variables]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    assert "Verdict: input-bound" in report.summary()


def _step_fn(model):
    optimizer = keras.optimizers.SGD(1e-3)
    variables = model.denoiser.trainable_variables

    @tf.function
    def step(x, scale=1.0):
        with tf.GradientTape() as tape:
            loss = model.diffusion_loss(x * scale, training=True)
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    return step


def test_python_value_argument_is_retracing(tiny_model, toy_images):
    batches = [(tf.constant(toy_images[:8]), float(i)) for i in range(12)]
    report = diagnostics.diagnose_step(
        _step_fn(tiny_model), batches, steps=4, warmup=1, verbose=False
    )
    assert report.verdict == "retracing"
    assert report.traces_after_warmup >= 3
    assert "argument 1" in report.retrace_causes[0]
    assert "Python float" in report.retrace_causes[0]


def test_varying_batch_shapes_are_retracing(tiny_model, toy_images):
    sizes = [8, 4, 6, 2, 5, 3, 7]
    batches = [tf.constant(toy_images[:n]) for n in sizes]
    report = diagnostics.diagnose_step(
        _step_fn(tiny_model), batches, steps=4, warmup=1, verbose=False
    )
    assert report.verdict == "retracing"
    assert "argument 0" in report.retrace_causes[0]
    assert "shape=(" in report.retrace_causes[0]


def test_fixed_shapes_do_not_retrace(tiny_model, toy_images):
    batches = [tf.constant(toy_images[i : i + 8]) for i in range(0, 64, 8)]
    report = diagnostics.diagnose_step(
        _step_fn(tiny_model), batches, steps=4, warmup=1, verbose=False
    )
    assert report.traces_after_warmup == 0
    assert report.verdict in ("compute-bound", "input-bound")


def test_throughput_logger_logs_images_per_sec(tiny_model, toy_images):
    lines = []
    logger = diagnostics.ThroughputLogger(batch_size=16, print_fn=lines.append)
    history = tiny_model.fit(
        _fast_dataset(toy_images),
        epochs=2,
        steps_per_epoch=3,
        verbose=0,
        callbacks=[logger],
    )
    rates = history.history["images_per_sec"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    assert len(lines) == 2 and "3 steps" in lines[0]


def test_bad_arguments(tiny_model, toy_images):
    with pytest.raises(ValueError, match="batch_size"):
        diagnostics.ThroughputLogger(batch_size=0)
    with pytest.raises(ValueError, match="steps"):
        diagnostics.diagnose(tiny_model, _fast_dataset(toy_images), steps=0)
    with pytest.raises(TypeError, match="step_fn"):
        diagnostics.diagnose_step(lambda x: x, [toy_images])
