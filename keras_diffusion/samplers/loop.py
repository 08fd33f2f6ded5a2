"""The samplers' one compiled loop, for `generate` and for the editing loops.

Each row of the tables is one denoiser evaluation; the state x after a row is
`a_state * x0 + s_state * z` at the next row's level (`a_state`, `s_state`
per row, see `Sampler._tables`). Two edits reuse the same loop:

- img2img (SDEdit): the loop starts at a later row, from the images noised
  to that row's level;
- inpainting (RePaint's replacement): after each row, the kept region is the
  input noised again to the level of the state, so the model fills the rest
  in agreement with it; after the last row it is the input itself.

A row whose `call` entry is 0 evaluates no denoiser: it is a move of the
forward process, `x_next = c_x * x + c_noise * z`, of the whole state, kept
region included (RePaint's jump back up the chain, Lugmayr et al., 2022,
Algorithm 1, line 10), with the row's own draw; consecutive ones run as one
pass of the loop. Tables without such rows (every sampler but RePaint) build
no branch for them: the choice is made when the loop is traced.
"""

import dataclasses

import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.utils import stateless


@dataclasses.dataclass
class Edit:
    """What an editing loop knows of the result.

    Attributes:
        images: float32 tensor of the shape of `x_T`: the clean input at the
            model's scale.
        keep: float32 tensor broadcasting to it, 1 where the input is kept
            and 0 where the model fills in (inpainting), or `None` (img2img:
            nothing is kept, the start is the noised input).
        begin_step: int, the sampler steps skipped from the first (img2img);
            0 starts from pure noise, as `generate`.
        seed: int32 tensor `(2,)`, the noise of the noised input.
    """

    images: object
    keep: object = None
    begin_step: int = 0
    seed: object = None


def noise(seed, index, shape):
    """The standard normal noise of draw `index` from the stateless `seed`.

    Philox is named rather than auto-selected so that the numbers do not
    depend on the device, and `keras_diffusion.utils.stateless` draws the
    same numbers in XLA-compiled code as in TensorFlow's own kernels.
    """
    draw_seed = tf.random.experimental.stateless_fold_in(seed, index, alg="philox")
    return stateless.normal(shape, draw_seed)


def begin_row(tables, begin):
    """The tables with row `begin` made the first of the loop: a multistep
    sampler's extrapolation from the previous x0 (`c_prev`) becomes its
    first-order step (`x0_prev = x0`)."""
    tables = dict(tables)
    for key in ("c_x0", "c_prev"):
        tables[key] = np.array(np.broadcast_to(tables[key], tables["t"].shape))
    tables["c_x0"][begin] += tables["c_prev"][begin]
    tables["c_prev"][begin] = 0.0
    return tables


def next_levels(tables):
    """`a_next`, `s_next`: the level of the state each row produces (the next
    row's, and the clean sample after the last)."""
    return (
        np.append(np.asarray(tables["a_state"], np.float64)[1:], 1.0),
        np.append(np.asarray(tables["s_state"], np.float64)[1:], 0.0),
    )


def run(denoise_fn, x, tables, seed, clip, begin=0, edit=None):
    """Runs rows `begin`... of `tables` from the state `x`; returns the last.

    Args:
        denoise_fn: callable `(x_in, t) -> output`.
        x: float32 tensor, the state at row `begin`.
        tables: dict of float64 arrays, one entry a row (`Sampler._tables`);
            an optional `call` entry, 0 where a row evaluates no denoiser and
            only re-noises (see the module's docstring).
        seed: int32 tensor `(2,)` of the sampler's own noise, or `None` for
            a deterministic sampler.
        clip: float or `None`, the clipping range of x0.
        begin: int, the first row.
        edit: optional `Edit` with `keep` (inpainting).
    """
    renoising = bool(np.any(np.asarray(tables.get("call", 1.0)) == 0.0))
    inpaint = edit is not None and edit.keep is not None
    tables = dict(tables)
    if inpaint:
        tables["a_next"], tables["s_next"] = next_levels(tables)
    const = {
        key: tf.constant(np.asarray(v, np.float64).astype(np.float32))
        for key, v in tables.items()
    }
    step = _step(denoise_fn, tables, seed, clip, edit)
    renoise = _renoise(tables, const, seed) if renoising else None

    def body(i, x, x0_prev, x_prev):
        if renoising:
            # A run of rows without a call is one pass: the untaken branch (the
            # model's graph) is then skipped once a run, not once a row.
            i_next, x_next, x0 = tf.cond(
                const["call"][i] > 0,
                lambda: (i + 1, *step(i, x, x0_prev, x_prev, const)),
                lambda: (*renoise(i, x), x0_prev),
            )
        else:
            i_next = i + 1
            x_next, x0 = step(i, x, x0_prev, x_prev, const)
        return (
            i_next,
            tf.ensure_shape(x_next, x.shape),
            tf.ensure_shape(x0, x.shape),
            x,
        )

    n = len(tables["t"])
    _, x, _, _ = tf.while_loop(
        lambda i, *_: i < n,
        body,
        (tf.constant(begin), x, tf.zeros_like(x), x),
        maximum_iterations=n - begin,
    )
    return x


def _renoise(tables, const, seed):
    """The rows without a model call from row `i` to the next row with one,
    as a function of `i` and the state; returns `(next row, x)`.

    Each is a move of the forward process, x_next ~ q(x_next | x), with the
    row's own draw; x0 stays the last model's, as no model saw these states.
    """
    call = np.asarray(tables["call"]) != 0.0
    rows = np.arange(len(call))
    # For each row, the first row at or after it with a call (or the end).
    ends = np.minimum.accumulate(np.where(call, rows, len(call))[::-1])[::-1]
    ends = tf.constant(ends.astype(np.int32))

    def forward(j, x):
        z = noise(seed, j, tf.shape(x))
        return j + 1, tf.ensure_shape(
            const["c_x"][j] * x + const["c_noise"][j] * z, x.shape
        )

    def renoise(i, x):
        end = ends[i]
        return end, tf.while_loop(lambda j, _: j < end, forward, (i, x))[1]

    return renoise


def _step(denoise_fn, tables, seed, clip, edit):
    """The update of a row that evaluates the denoiser, as a function of the
    row `i`, the state and the tables' constants; returns `(x_next, x0)`."""
    stochastic = seed is not None
    two_stage = bool(np.any(tables.get("c_xprev", 0.0) != 0.0))
    inpaint = edit is not None and edit.keep is not None

    def step(i, x, x0_prev, x_prev, const):
        c = {key: v[i] for key, v in const.items()}
        t = tf.fill(tf.shape(x)[:1], c["t"])
        if "t_interval" in c:  # a mean flow's second time: (batch, 2)
            t = tf.stack([t, tf.fill(tf.shape(x)[:1], c["t_interval"])], axis=1)
        out = ops.cast(denoise_fn(x * c["in_scale"], t), "float32")
        x0 = c["x0_x"] * x + c["x0_out"] * out
        eps = c["eps_x"] * x + c["eps_out"] * out
        if clip is not None:
            x0 = ops.clip(x0, -clip, clip)
        x_next = (
            c["c_x"] * x + c["c_x0"] * x0 + c["c_eps"] * eps + c["c_prev"] * x0_prev
        )
        if two_stage:
            x_next += c["c_xprev"] * x_prev
        if stochastic:
            x_next += c["c_noise"] * noise(seed, i, tf.shape(x))
        if inpaint:
            known = c["a_next"] * edit.images + c["s_next"] * noise(
                edit.seed, i, tf.shape(x)
            )
            x_next = edit.keep * known + (1.0 - edit.keep) * x_next
        return x_next, x0

    return step
