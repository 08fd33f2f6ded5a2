import keras
import numpy as np
import pytest

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
