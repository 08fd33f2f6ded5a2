"""The samplers' one loop: rows without a model call (RePaint's jumps)."""

import numpy as np
import tensorflow as tf

from keras_diffusion.samplers import loop

SHAPE = (2, 4, 4, 1)
SEED, EDIT_SEED = tf.constant([1, 2]), tf.constant([3, 4])


def _tables(**rows):
    """Tables of `x0 = out` rows: `c_*` as given, every other entry 0, or 1
    for `in_scale`."""
    n = len(rows["call"])
    tables = {key: np.zeros(n) for key in ("x0_x", "eps_x", "eps_out", "c_eps")}
    tables.update(in_scale=np.ones(n), x0_out=np.ones(n), c_prev=np.zeros(n))
    tables.update({key: np.asarray(v, np.float64) for key, v in rows.items()})
    return tables


def _inpaint(tables):
    """`loop.run` of `tables` on a denoiser returning 0.25, the top half of
    0.5 kept; returns the result, the kept mask and the timesteps seen."""
    seen = []

    def denoise(x, t):
        seen.append(float(t[0]))
        return tf.fill(tf.shape(x), 0.25)

    keep = np.zeros(SHAPE, np.float32)
    keep[:, :2] = 1.0
    edit = loop.Edit(tf.fill(SHAPE, 0.5), tf.constant(keep), 0, EDIT_SEED)
    x = loop.run(denoise, tf.zeros(SHAPE), tables, SEED, None, edit=edit)
    return x.numpy(), keep, seen


def _z(seed, index):
    return loop.noise(seed, index, SHAPE).numpy()


def test_a_row_without_a_call_renoises_the_whole_state():
    # Row 0 calls the model (x0 = out, the kept region noised to row 1's
    # level); row 1 calls nothing: x_next = 0.6 x + 0.8 z, kept region
    # included, with the row's own draw.
    tables = _tables(
        call=[1, 0],
        t=[5, 0],
        c_x=[0, 0.6],
        c_x0=[1, 0],
        c_noise=[0, 0.8],
        a_state=[0.1, 0.3],
        s_state=[0.9, 0.7],
    )
    x, keep, seen = _inpaint(tables)
    assert seen == [5.0]
    x1 = keep * (0.3 * 0.5 + 0.7 * _z(EDIT_SEED, 0)) + (1.0 - keep) * 0.25
    np.testing.assert_allclose(x, 0.6 * x1 + 0.8 * _z(SEED, 1), atol=1e-6)


def test_a_run_of_rows_without_a_call_then_a_call():
    # Rows 1 and 2 re-noise (draws 1 and 2), row 3 calls the model on the
    # result: x_next = x + 0.5 x0, and the last row keeps the input itself.
    tables = _tables(
        call=[1, 0, 0, 1],
        t=[5, 0, 0, 3],
        c_x=[0, 0.6, 0.6, 1],
        c_x0=[1, 0, 0, 0.5],
        c_noise=[0, 0.8, 0.8, 0],
        a_state=[0.1, 0.3, 0.2, 0.1],
        s_state=[0.9, 0.7, 0.8, 0.9],
    )
    x, keep, seen = _inpaint(tables)
    assert seen == [5.0, 3.0]
    x1 = keep * (0.3 * 0.5 + 0.7 * _z(EDIT_SEED, 0)) + (1.0 - keep) * 0.25
    x3 = 0.6 * (0.6 * x1 + 0.8 * _z(SEED, 1)) + 0.8 * _z(SEED, 2)
    np.testing.assert_allclose(x, keep * 0.5 + (1.0 - keep) * (x3 + 0.125), atol=1e-6)
