"""RePaint: inpainting with resampling, as diffusers' `RePaintScheduler`."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.samplers import loop
from keras_diffusion.samplers.base import (
    PREDICTION_TYPES,
    Sampler,
    check_noise,
    seed_tensor,
)
from keras_diffusion.utils.checks import check_choice, check_float, check_int


def jump_schedule(num_steps, jump_length, jump_n_sample):
    """The step indices of RePaint's resampling schedule, as diffusers'
    `RePaintScheduler.set_timesteps`: down one step at a time, and every
    `jump_length` steps back up `jump_length` steps, `jump_n_sample - 1`
    times. A step down is where the index falls, up where it rises."""
    jumps = {
        j: jump_n_sample - 1 for j in range(0, num_steps - jump_length, jump_length)
    }
    t, out = num_steps, []
    while t >= 1:
        t -= 1
        out.append(t)
        if jumps.get(t, 0) > 0:
            jumps[t] -= 1
            for _ in range(jump_length):
                t += 1
                out.append(t)
    return np.asarray(out, np.int64)


@keras.saving.register_keras_serializable(package="keras_diffusion")
class RePaintSampler(Sampler):
    """RePaint (Lugmayr et al., 2022), as diffusers' `RePaintScheduler` and
    `RePaintPipeline` run it.

    Steps of `T // num_steps` timesteps down with the DDIM update of
    `eta` (eta = 1 is DDPM's), each drawing one noise that both the update
    and the kept region's re-noising use (as diffusers does); every
    `jump_length` steps the sample goes back up `jump_length` steps by the
    forward process (one draw per timestep), `jump_n_sample - 1` times, so
    that the filled region harmonises with the kept one. Given no region to
    keep (`generate`), it samples as that DDIM with the same jumps. The
    jumps multiply the model calls: diffusers' defaults (250 steps, jumps of
    10, 10 samples) make 2,410 calls (`timesteps(schedule)` lists them). It
    runs on a `NoiseSchedule` only.

    Args:
        num_steps: int >= 1, the steps down (at most T are taken, as
            diffusers does). Defaults to `250`.
        jump_length: int >= 1, the steps of one jump back up. Defaults to `10`.
        jump_n_sample: int >= 1, the times each stretch is sampled (1: no
            resampling). Defaults to `10`.
        eta: float in [0, 1], the DDIM noise of a step down. Defaults to `0.0`.
        clip_sample: bool, clip x0 to [-1, 1]. Defaults to `True`.

    Example:

    ```python
    sampler = keras_diffusion.samplers.RePaintSampler(50, jump_length=5)
    filled = model.inpaint(images, mask, sampler=sampler, seed=0)
    ```

    Reference:
        - [Lugmayr et al., 2022](https://arxiv.org/abs/2201.09865)
    """

    name = "repaint"

    starts_part_way = False

    def __init__(
        self, num_steps=250, jump_length=10, jump_n_sample=10, eta=0.0, clip_sample=True
    ):
        super().__init__(num_steps, "leading")
        self.jump_length = check_int("jump_length", jump_length, 1)
        self.jump_n_sample = check_int("jump_n_sample", jump_n_sample, 1)
        self.eta = check_float("eta", eta, 0.0, 1.0)
        self._set_clip(clip_sample, 1.0)

    def _steps_for(self, schedule):
        # As diffusers: at most T steps.
        return min(self.num_steps, schedule.num_train_timesteps)

    def _rows(self, schedule):
        """The host-side tables of the rows: `down` (a model call) or not (a
        jump up), the timestep, the coefficients and each row's first draw."""
        T = schedule.num_train_timesteps
        n = self._steps_for(schedule)
        stride = T // n
        steps = jump_schedule(n, self.jump_length, self.jump_n_sample) * stride
        abar = schedule.alphas_cumprod_float64
        betas = np.asarray(schedule.betas, np.float64)
        rows, draw, last = [], 0, steps[0] + 1
        for t in steps:
            if t < last:
                prev = abar[t - stride] if t - stride >= 0 else 1.0
                var = (1 - prev) / (1 - abar[t]) * (1 - abar[t] / prev)
                std = self.eta * np.sqrt(var)
                up = np.zeros((2, stride))
                rows.append((1.0, t, abar[t], prev, std if t > 0 else 0.0, draw, up))
                draw += 1
            else:  # x_{last + stride} from x_last, one draw a timestep
                b = betas[last : last + stride]
                up = np.stack([np.sqrt(1 - b), np.sqrt(b)])
                rows.append((0.0, last, 0.5, 0.5, 0.0, draw, up))
                draw += stride
            last = t
        names = ("down", "t", "abar", "abar_prev", "std", "draw", "up")
        columns = zip(*rows, strict=True)
        return {k: np.asarray(v) for k, v in zip(names, columns, strict=True)}

    def timesteps(self, schedule):
        self.validate(schedule)
        rows = self._rows(schedule)
        return rows["t"][rows["down"] > 0].astype(np.int64)

    def sample(
        self, denoise_fn, x_T, schedule, prediction_type="epsilon", seed=None, edit=None
    ):
        """As `Sampler.sample`; with `edit.keep`, the RePaint inpainting of
        `edit.images` (`edit.begin_step` must be 0)."""
        x_T, rows = self._prepare(denoise_fn, x_T, schedule, prediction_type, edit)
        seed = seed_tensor(seed)
        const = {
            k: tf.constant(np.asarray(v, np.float64).astype(np.float32))
            for k, v in rows.items()
            if k != "draw"
        }
        draws = tf.constant(rows["draw"].astype(np.int32))
        stride = rows["up"].shape[-1]
        keep = None if edit is None else edit.keep

        def down(x, c, k):
            out = ops.cast(denoise_fn(x, tf.fill(tf.shape(x)[:1], c["t"])), "float32")
            x0, eps = _read(out, x, c["abar"], prediction_type)
            if self.clip_sample:
                x0 = ops.clip(x0, -1.0, 1.0)
            z = loop.noise(seed, k, tf.shape(x))
            a_prev = c["abar_prev"]
            unknown = (
                ops.sqrt(a_prev) * x0
                + ops.sqrt(1.0 - a_prev - c["std"] ** 2) * eps
                + c["std"] * z
            )
            if keep is None:
                return unknown
            known = ops.sqrt(a_prev) * edit.images + ops.sqrt(1.0 - a_prev) * z
            return keep * known + (1.0 - keep) * unknown

        def up(x, c, k):
            def step(j, x):
                z = loop.noise(seed, k + j, tf.shape(x))
                return j + 1, c["up"][0][j] * x + c["up"][1][j] * z

            return tf.while_loop(lambda j, _: j < stride, step, (0, x))[1]

        def body(i, x):
            c = {key: v[i] for key, v in const.items()}
            x = tf.cond(
                c["down"] > 0, lambda: down(x, c, draws[i]), lambda: up(x, c, draws[i])
            )
            return i + 1, tf.ensure_shape(x, x_T.shape)

        n = len(rows["t"])
        return tf.while_loop(
            lambda i, _: i < n, body, (tf.constant(0), x_T), maximum_iterations=n
        )[1]

    def _prepare(self, denoise_fn, x_T, schedule, prediction_type, edit):
        if not callable(denoise_fn):
            raise TypeError(
                f"Argument `denoise_fn` must be callable. Received: {denoise_fn!r}"
            )
        self.validate(schedule)
        if edit is not None and edit.begin_step:
            raise ValueError(
                "RePaintSampler inpaints and samples from noise; it does not start "
                "from a noised image (img2img): use another sampler there. "
                f"Received: begin_step={edit.begin_step}"
            )
        check_choice("prediction_type", prediction_type, PREDICTION_TYPES)
        rows = self._rows(schedule)
        down = rows["abar"][rows["down"] > 0]
        if prediction_type == "epsilon" and np.any(down <= 0.0):
            raise ValueError(
                "Argument `prediction_type` cannot be sampled on this schedule: "
                "x0 is undefined where alphas_cumprod is 0 (zero terminal SNR); "
                "use prediction_type='v_prediction' or 'sample'. "
                f"Received: prediction_type={prediction_type!r}"
            )
        return ops.cast(check_noise(x_T), "float32"), rows

    def get_config(self):
        return {
            "num_steps": self.num_steps,
            "jump_length": self.jump_length,
            "jump_n_sample": self.jump_n_sample,
            "eta": self.eta,
            "clip_sample": self.clip_sample,
        }


def _read(out, x, abar, prediction_type):
    """x0 and eps of the model output at alphas_cumprod `abar`."""
    a, s = ops.sqrt(abar), ops.sqrt(1.0 - abar)
    if prediction_type == "epsilon":
        return (x - s * out) / a, out
    if prediction_type == "v_prediction":
        return a * x - s * out, s * x + a * out
    return out, (x - a * out) / s
