"""`ClassLabels`: today's label condition, its null and its dropout."""

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.conditioning import ClassLabels


def test_dropout_replaces_labels_by_the_null_class_from_the_seed():
    labels = ClassLabels(5, dropout=0.5)
    batch = tf.constant(np.arange(400) % 5, "int32")
    seed = tf.constant([3, 4], "int32")
    dropped = labels.in_step(batch, 400, seed, training=True).numpy()
    again = labels.in_step(batch, 400, seed, training=True).numpy()
    np.testing.assert_array_equal(dropped, again)
    kept = dropped != 5
    np.testing.assert_array_equal(dropped[kept], batch.numpy()[kept])
    assert 0.4 < 1 - kept.mean() < 0.6
    other = labels.in_step(batch, 400, tf.constant([3, 5], "int32"), True).numpy()
    assert not np.array_equal(other, dropped)
    # Evaluation, and no dropout: the labels as they are.
    np.testing.assert_array_equal(labels.in_step(batch, 400, seed, False), batch)
    plain = ClassLabels(5).in_step(batch, 400, seed, training=True)
    np.testing.assert_array_equal(plain, batch)


def test_generate_labels_checked_drawn_and_null():
    labels = ClassLabels(3)
    np.testing.assert_array_equal(labels.null(2), [3, 3])
    assert labels.check(2, 4, 1.0)[0].tolist() == [2, 2, 2, 2]
    assert labels.check(None, 4, 2.0) == (None, True)
    drawn = labels.prepare(None, 64, seed=7)
    np.testing.assert_array_equal(drawn, labels.prepare(None, 64, seed=7))
    assert set(drawn.tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match=r"labels in \[0, 3\]"):
        labels.check([0, 3], 2, 1.0)
    with pytest.raises(ValueError, match="null class.*guidance_scale=2.0"):
        ClassLabels(3, null_class=False).check(None, 2, 2.0)
