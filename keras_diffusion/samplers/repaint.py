"""RePaint: inpainting with resampling, as diffusers' `RePaintScheduler`."""

import dataclasses

import keras
import numpy as np

from keras_diffusion.samplers.base import seed_tensor
from keras_diffusion.samplers.ddim import ddim_plan
from keras_diffusion.samplers.vp_base import VPSampler
from keras_diffusion.utils.checks import check_float, check_int


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
class RePaintSampler(VPSampler):
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
    runs on a `NoiseSchedule` only, on the samplers' one compiled loop
    (`keras_diffusion.samplers.loop`): a step down is a row of its tables, a
    jump back up a run of rows without a model call.

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

    def evaluations(self, num_steps):
        """The denoiser evaluations of `num_steps` steps down: one a step
        down, the jumps back up included (`timesteps(schedule)` lists them)."""
        steps = jump_schedule(num_steps, self.jump_length, self.jump_n_sample)
        return int(np.sum(steps < np.append(num_steps, steps[:-1])))

    def _rows(self, schedule):
        """The rows of the loop, on the host, as NumPy arrays (vectorised: a
        caller's `tf.function` may autograph this code).

        Returns a dict of `call` (1 for a step down, one model call; 0 for a
        row of a jump back up), `t` (each row's timestep; on a jump, the
        timestep whose beta it adds), `abar_prev` (the level a step down goes
        to), `beta` (a jump row's) and `level` (the state's level before a
        jump row). One row a noise draw, in diffusers' order: the row index
        is the draw index.
        """
        n = self._steps_for(schedule)
        stride = schedule.num_train_timesteps // n
        steps = jump_schedule(n, self.jump_length, self.jump_n_sample) * stride
        abar = schedule.alphas_cumprod_float64
        betas = np.asarray(schedule.betas, np.float64)
        # As `RePaintPipeline`: a step down where the timestep falls; where it
        # rises, diffusers' `undo_step(x, t_last)` adds the `stride` betas
        # from t_last up, a row each.
        last = np.append(steps[0] + 1, steps[:-1])
        down = steps < last
        counts = np.where(down, 1, stride)
        entry = np.repeat(np.arange(len(steps)), counts)
        offset = np.arange(len(entry)) - np.repeat(np.cumsum(counts) - counts, counts)
        call = down[entry]
        t = np.where(call, steps[entry], last[entry] + offset)
        abar_prev = np.where(call & (t >= stride), abar[t - stride], 1.0)
        beta = np.where(call, 0.0, betas[t])
        # A jump starts at the level of the step down before it, and each of
        # its rows keeps 1 - beta of the signal's power: the log of the power
        # kept before each row (no underflow), exactly 0 at a jump's start.
        kept = np.cumsum(np.log1p(-beta))
        kept_before = np.append(0.0, kept[:-1])
        start = np.maximum.accumulate(np.where(call, np.arange(len(t)), 0))
        level = abar_prev[start] * np.exp(kept_before - kept[start])
        return {
            "call": call.astype(np.float64),
            "t": t,
            "abar_prev": abar_prev,
            "beta": beta,
            "level": level,
        }

    def _timesteps(self, schedule):
        rows = self._rows(schedule)
        return rows["t"][rows["call"] > 0].astype(np.int64)

    def _plan(self, schedule):
        """The steps down: the DDIM update of `eta` (Song et al., 2021)."""
        rows = self._rows(schedule)
        down = rows["call"] > 0
        t = rows["t"][down]
        abar, abar_prev = schedule.alphas_cumprod_float64[t], rows["abar_prev"][down]
        # DDIM's eq. (12) in place of RePaint's Algorithm 1, line 7 (as
        # diffusers): x_{t-1}^unknown = sqrt(abar_prev) x0 +
        # sqrt(1 - abar_prev - sigma_t^2) eps + sigma_t z.
        return ddim_plan(t, abar, abar_prev, self.eta)

    def _tables(self, schedule, prediction_type):
        """The tables of the steps down (`Sampler._tables`: the model output
        read for its prediction type), with the jumps back up between them as
        rows without a model call."""
        tables, init_sigma = super()._tables(schedule, prediction_type)
        rows = self._rows(schedule)
        down = rows["call"] > 0
        full = {"call": rows["call"], "t": rows["t"].astype(np.float64)}
        for key, value in tables.items():
            if key not in full:
                full[key] = np.zeros(len(down))
                full[key][down] = np.broadcast_to(value, (int(down.sum()),))
        up = ~down
        # 3. The jump back, Algorithm 1, line 10, a timestep at a time:
        # x_{t+1} = sqrt(1 - beta) x_t + sqrt(beta) z, no model call.
        full["c_x"][up] = np.sqrt(1.0 - rows["beta"][up])
        full["c_noise"][up] = np.sqrt(rows["beta"][up])
        # The state's level: the step down before a jump noises its kept
        # region to the jump's first level (`loop.next_levels`).
        full["a_state"][up] = np.sqrt(rows["level"][up])
        full["s_state"][up] = np.sqrt(1.0 - rows["level"][up])
        full["in_scale"][up] = 1.0
        return full, init_sigma

    def sample(
        self, denoise_fn, x_T, schedule, prediction_type="epsilon", seed=None, edit=None
    ):
        """As `Sampler.sample`; with `edit.keep`, the RePaint inpainting of
        `edit.images` (`edit.begin_step` must be 0)."""
        if edit is not None and edit.begin_step:
            raise ValueError(
                "RePaintSampler inpaints and samples from noise; it does not start "
                "from a noised image (img2img): use another sampler there. "
                f"Received: begin_step={edit.begin_step}"
            )
        seed = seed_tensor(seed)
        if edit is not None and edit.keep is not None:
            # 4. Algorithm 1, lines 5 and 8: the kept region's x_{t-1}^known
            # (eq. (8a)) is noised with the draw of the step's own update, as
            # diffusers does (one noise for both), then blended by the mask.
            edit = dataclasses.replace(edit, seed=seed)
        return super().sample(denoise_fn, x_T, schedule, prediction_type, seed, edit)
