import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.averages.power_ema import PowerFunctionEMA
from keras_diffusion.models import ExponentialMovingAverage


def test_ema_warmup_decay():
    variable = keras.Variable(np.zeros(3, "float32"))
    ema = ExponentialMovingAverage([variable], decay=0.999, warmup=True)
    assert float(ema.current_decay()) == pytest.approx(0.1)
    variable.assign(np.ones(3, "float32"))
    ema.update([variable])
    np.testing.assert_allclose(ema.shadows[0].numpy(), 0.9)
    assert float(ema.current_decay()) == pytest.approx(2 / 11)


def test_a_step_without_an_update_leaves_the_ema_and_its_count_alone():
    variable = keras.Variable(np.zeros(2, "float32"))
    ema = ExponentialMovingAverage([variable], decay=0.5, warmup=False)
    variable.assign(np.ones(2, "float32"))
    ema.update([variable], applied=keras.ops.convert_to_tensor(False))
    np.testing.assert_array_equal(ema.shadows[0].numpy(), 0.0)
    assert int(ema.num_updates.numpy()) == 0
    ema.update([variable], applied=keras.ops.convert_to_tensor(True))
    np.testing.assert_allclose(ema.shadows[0].numpy(), 0.5)
    assert int(ema.num_updates.numpy()) == 1


def test_an_update_is_the_float32_formula_bit_for_bit():
    rng = np.random.default_rng(0)
    start, target = rng.normal(size=(2, 64)).astype("float32")
    variable = keras.Variable(start)
    ema = ExponentialMovingAverage([variable], decay=0.9, warmup=False)
    variable.assign(target)
    ema.update([variable], applied=keras.ops.convert_to_tensor(True))
    rate = np.float32(1.0) - np.float32(0.9)
    np.testing.assert_array_equal(
        ema.shadows[0].numpy(), start - (start - target) * rate
    )


def _update_reads(make_average, count):
    """The variable reads of a traced update of an average of `count`
    variables."""
    variables = [keras.Variable(np.zeros((3, 2), "float32")) for _ in range(count)]
    average = make_average(variables)
    update = tf.function(lambda: average.update(variables, tf.constant(True)))
    graph = update.get_concrete_function().graph
    return sum(op.type == "ReadVariableOp" for op in graph.get_operations())


@pytest.mark.parametrize(
    "make_average, averages",
    [
        (ExponentialMovingAverage, 1),
        (lambda variables: PowerFunctionEMA(variables, (0.05, 0.1)), 2),
    ],
)
def test_an_update_reads_each_weight_and_each_shadow_once(make_average, averages):
    # The update is traced into every train step, per variable: each read
    # more is one more op a variable in the step's graph.
    per_variable = _update_reads(make_average, 3) - _update_reads(make_average, 2)
    assert per_variable == 1 + averages
