"""The derivative along the path that the continuous few-step form and the
mean-flow process regress onto: one forward-mode pass, pinned to reverse
mode."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_diffusion as kd
from keras_diffusion.schedules import forward_mode
from keras_diffusion.schedules.process import TrainingStep
from tests.denoisers import tiny_unet
from tests.schedules.few_calls import fit_tiny


@pytest.mark.parametrize("time_inputs", [1, 2])
def test_the_forward_mode_derivative_is_reverse_mode_s_along_the_path(time_inputs):
    # d/ds F(x_s, time(s)) = J_x F v + J_time F T, every time column moving
    # at T; against reverse mode through <F, w> (finite differences are too
    # coarse: the sinusoidal time embedding of s * 1000 varies fast).
    net = tiny_unet(time_inputs=time_inputs)
    rng = np.random.default_rng(1)
    for variable in net.trainable_variables:  # zero-initialised outputs move
        variable.assign(variable.numpy() + rng.normal(0, 0.1, variable.shape))
    x_s = tf.constant(rng.normal(size=(6, 8, 8, 1)), "float32")
    v = tf.constant(rng.normal(size=(6, 8, 8, 1)), "float32")
    s = tf.constant([0.2, 0.5, 0.9, 0.3, 0.7, 0.99])
    time = s * 1000.0 if time_inputs == 1 else tf.stack([s * 1000.0, s * 400.0], 1)
    seeds = (tf.constant([3, 0]), tf.constant([4, 0]))
    step = TrainingStep(x_s, None, seeds, False, lambda inputs, _: net(inputs))
    _, jvp = forward_mode.along_path(step, x_s, time, v, 1000.0)
    w = tf.random.stateless_normal(x_s.shape, (5, 6))
    with tf.GradientTape() as tape:
        tape.watch([x_s, time])
        inner = tf.reduce_sum(step.network(x_s, time) * w)
    grad_x, grad_t = tape.gradient(inner, [x_s, time])
    want = float(tf.reduce_sum(grad_x * v) + tf.reduce_sum(grad_t) * 1000.0)
    assert float(tf.reduce_sum(jvp * w)) == pytest.approx(want, rel=1e-4)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.xla
@pytest.mark.parametrize(
    "schedule, time_inputs",
    [
        (kd.ConsistencySchedule(training="continuous", curriculum_steps=2), 1),
        (kd.MeanFlowSchedule(), 3),
    ],
    ids=["consistency-continuous", "meanflow"],
)
def test_the_forward_mode_step_compiles_with_xla(schedule, time_inputs):
    # XLA compiles the forward-mode graph of each block (and of the pair's
    # time embedding), and its steps train as graph mode's do, from the
    # same weights and draws.
    losses = []
    for jit in (True, False):
        keras.utils.set_random_seed(7)
        model, _ = fit_tiny(schedule, jit, 1, time_inputs=time_inputs)
        losses.append(model.history.history["loss"])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
