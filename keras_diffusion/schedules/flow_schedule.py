"""FlowMatchSchedule: the straight path of flow matching (rectified flow)."""

import math

import keras
import numpy as np
from keras import ops

from keras_diffusion.schedules.levels import Levels
from keras_diffusion.schedules.process import Process
from keras_diffusion.schedules.registry import register_process
from keras_diffusion.utils import stateless
from keras_diffusion.utils.checks import check_choice, check_float, check_int
from keras_diffusion.utils.settings import Setting

TIMESTEP_SAMPLINGS = ("logit_normal", "uniform", "mode")


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion")
class FlowMatchSchedule(Process):
    """Flow matching on the straight path from data to noise (rectified flow).

    The data is noised as `x_s = (1 - s) * x0 + s * noise` for a noise level
    s in [0, 1]; the network predicts the velocity `noise - x0` and is called
    with diffusers' timestep `s * num_train_timesteps` (Esser et al., 2024,
    as Stable Diffusion 3 trains). Training draws `u` by `timestep_sampling`
    and shifts it, `s = shift * u / (1 + (shift - 1) * u)`, the same shift
    diffusers' `FlowMatchEulerDiscreteScheduler` applies to its sigmas; the
    loss is the unweighted MSE on the velocity, SD3's default. The samplers
    step over `sigmas(num_steps)`, the noise levels of diffusers' flow-match
    schedulers. The NumPy methods compute in float64.

    Args:
        num_train_timesteps: int >= 2, the timestep scale T: the network gets
            `s * T`. Defaults to `1000`.
        shift: float > 0, the timestep shift; above 1 it moves the noise
            levels toward noise (SD3 uses 3.0). Defaults to `1.0`.
        timestep_sampling: str, how training draws `u` in (0, 1):
            `"logit_normal"` (sigmoid of N(logit_mean, logit_std**2)),
            `"uniform"`, or `"mode"` (SD3's mode sampling with `mode_scale`).
            Defaults to `"logit_normal"`.
        logit_mean: float, the mean of the logit-normal draw. Defaults to
            `0.0`.
        logit_std: float > 0, its standard deviation. Defaults to `1.0`.
        mode_scale: float in [-1, 2/(pi - 2)] (the range where the mode
            map stays monotone in [0, 1]), the scale of `"mode"` sampling.
            Defaults to `1.29`, SD3's.

    Example:

    ```python
    schedule = keras_diffusion.FlowMatchSchedule(shift=3.0)
    model = keras_diffusion.DiffusionModel(unet, schedule=schedule)
    sigmas = schedule.sigmas(8)  # 1.0 ... 0.003
    ```

    Reference:
        - [Liu et al., 2022](https://arxiv.org/abs/2209.03003)
        - [Lipman et al., 2022](https://arxiv.org/abs/2210.02747)
        - [Esser et al., 2024](https://arxiv.org/abs/2403.03206)
    """

    name = "flow"
    sampler_family = "flow"
    objective_note = "the network predicts the velocity noise - x0, unweighted"
    settings = (
        Setting(
            "timesteps",
            int,
            1000,
            help="the timestep scale T: the network gets s * T",
            argument="num_train_timesteps",
        ),
        Setting(
            "shift",
            float,
            1.0,
            help="timestep shift, > 1 moves the noise levels toward noise "
            "(SD3 uses 3.0)",
        ),
        Setting(
            "timestep_sampling",
            str,
            "logit_normal",
            TIMESTEP_SAMPLINGS,
            "how training draws noise levels",
        ),
        Setting("logit_mean", float, 0.0, help="mean of the logit-normal draw"),
        Setting("logit_std", float, 1.0, help="std of the logit-normal draw"),
    )
    network_inputs = (
        "flow matching's s * T on (1 - s) x0 + s n, predicting the velocity"
    )

    def __init__(
        self,
        num_train_timesteps=1000,
        shift=1.0,
        timestep_sampling="logit_normal",
        logit_mean=0.0,
        logit_std=1.0,
        mode_scale=1.29,
    ):
        self.num_train_timesteps = check_int(
            "num_train_timesteps", num_train_timesteps, minimum=2
        )
        self.shift = check_float("shift", shift, greater_than=0.0)
        self.timestep_sampling = check_choice(
            "timestep_sampling", timestep_sampling, TIMESTEP_SAMPLINGS
        )
        self.logit_mean = check_float("logit_mean", logit_mean)
        self.logit_std = check_float("logit_std", logit_std, greater_than=0.0)
        # Beyond this range 1 - u - scale (cos^2(pi u / 2) - 1 + u) leaves
        # [0, 1] or stops being monotone.
        self.mode_scale = check_float(
            "mode_scale", mode_scale, minimum=-1.0, maximum=2.0 / (np.pi - 2.0)
        )

    def shifted(self, u):
        """shift * u / (1 + (shift - 1) * u), elementwise, float64."""
        u = np.asarray(u, np.float64)
        return self.shift * u / (1.0 + (self.shift - 1.0) * u)

    @property
    def sigma_min(self):
        """The smallest training noise level of diffusers' scheduler,
        `shifted(1 / T)` in float32 (its `sigma_min`)."""
        return float(np.float32(self.shifted(1.0 / self.num_train_timesteps)))

    def sigmas(self, num_steps):
        """The `num_steps` noise levels of diffusers' `set_timesteps`, 1 first.

        As `FlowMatchEulerDiscreteScheduler` and
        `FlowMatchHeunDiscreteScheduler`: timesteps evenly spaced from `T` to
        `T * sigma_min`, divided by T and shifted (so `sigma_min` is shifted
        twice, as there).

        Returns:
            float64 NumPy array of `num_steps` levels, largest first.
        """
        T = self.num_train_timesteps
        t = np.linspace(T * 1.0, T * self.sigma_min, int(num_steps))
        return self.shifted(t / T)

    # The samplers multiply the unit starting noise by it: x_1 is the noise.
    init_sigma = 1.0

    def dpm_sigmas(self, num_steps):
        """The `num_steps` flow sigmas of diffusers' `DPMSolverMultistepScheduler`
        with `use_flow_sigmas=True`: `shifted(1 - linspace(1, 1/T, n + 1))`,
        largest first, without its final 0 (so it starts below 1)."""
        T = self.num_train_timesteps
        ramp = 1.0 - np.linspace(1.0, 1.0 / T, int(num_steps) + 1)
        return np.flip(self.shifted(ramp))[:-1].copy()

    def sampling_levels(self, spacing):
        """The levels s of a sampler's `Spacing` on x = (1 - s) x0 + s n, then
        0: `sigmas(num_steps)` (diffusers' flow-match Euler and Heun, the
        network given s * T), or for the "dpm" rule `dpm_sigmas(num_steps)`
        (its `DPMSolverMultistepScheduler` with `use_flow_sigmas`, the
        network given s * T truncated to an integer). The network returns
        the velocity, the slope of the path."""
        n = spacing.num_steps
        levels = self.dpm_sigmas(n) if spacing.rule == "dpm" else self.sigmas(n)
        reading = {"sigma": levels}
        if spacing.rule == "dpm":
            reading["t"] = np.trunc(levels * self.num_train_timesteps)
        s = np.append(levels, 0.0)
        return Levels(
            alpha=1.0 - s,
            sigma=s,
            reading=reading,
            init_sigma=float(self.init_sigma),
            reads_velocity=True,
        )

    @staticmethod
    def _levels(s, x0):
        s = ops.cast(ops.convert_to_tensor(s), "float32")
        return ops.reshape(s, (-1,) + (1,) * (len(x0.shape) - 1))

    def add_noise(self, x0, noise, s):
        """x_s = (1 - s) x0 + s noise, in float32 and of the dtype of `x0`;
        `s` is a scalar or a vector of shape (batch,)."""
        x0 = ops.convert_to_tensor(x0)
        s_b = self._levels(s, x0)
        out = (1.0 - s_b) * ops.cast(x0, "float32") + s_b * ops.cast(noise, "float32")
        return ops.cast(out, x0.dtype)

    def velocity(self, x0, noise):
        """noise - x0: d x_s / ds, the network's target; float32 computed, of
        the dtype of `x0`."""
        x0 = ops.convert_to_tensor(x0)
        out = ops.cast(noise, "float32") - ops.cast(x0, "float32")
        return ops.cast(out, x0.dtype)

    def draw_levels(self, batch, seed):
        """Training noise levels s in [0, 1), shape (batch,): `timestep_sampling`
        draws u, which the shift maps to s."""
        if self.timestep_sampling == "logit_normal":
            n = stateless.normal([batch], seed)
            u = ops.sigmoid(self.logit_mean + self.logit_std * n)
        else:
            u = stateless.uniform([batch], seed)
            if self.timestep_sampling == "mode":
                # SD3's mode sampling (diffusers'
                # compute_density_for_timestep_sampling).
                bend = ops.square(ops.cos(0.5 * math.pi * u)) - 1.0 + u
                u = 1.0 - u - self.mode_scale * bend
        return self.shift * u / (1.0 + (self.shift - 1.0) * u)

    def training_loss(self, step):
        """Esser et al. (2024), as SD3 trains: s from `draw_levels`, x_s =
        (1 - s) x0 + s noise, the network called with `s * T` (diffusers'
        timestep), the unweighted MSE to the velocity noise - x0; float32
        (see `Process.training_loss`)."""
        s = self.draw_levels(step.batch_size, step.seeds[0])
        x0, noise = step.x0, step.noise()
        velocity = step.network(
            self.add_noise(x0, noise, s), s * self.num_train_timesteps
        )
        return ops.mean(step.mean_square(velocity - (noise - x0)))

    def output_tables(self, plan, prediction_type):
        """The reading of a "flow" plan (see `Process.output_tables`):
        `plan["sigma"]` is the level s the network is evaluated at,
        `plan["t"]` (optional) its timestep input, s * T by default; the
        velocity v = n - x0 gives x0 = x - s v and n = x + (1 - s) v."""
        s = np.asarray(plan["sigma"], np.float64)
        ones = np.ones_like(s)
        t = plan.get("t", s * self.num_train_timesteps)
        return {
            "t": np.asarray(t, np.float64),
            "in_scale": ones,
            "x0_x": ones,
            "x0_out": -s,
            "eps_x": ones,
            "eps_out": 1.0 - s,
            # The state x = (1 - s) x0 + s n.
            "a_state": 1.0 - s,
            "s_state": s,
        }
