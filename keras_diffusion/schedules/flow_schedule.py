"""FlowMatchSchedule: the straight path of flow matching (rectified flow)."""

import keras
import numpy as np

from keras_diffusion.utils.checks import check_choice, check_float, check_int

TIMESTEP_SAMPLINGS = ("logit_normal", "uniform", "mode")

# The arguments of `FlowMatchSchedule` a training run sets, by name: a run's
# settings of the same names (`keras_diffusion.run.flow_config`) and a
# checkpoint's schedule (`keras_diffusion.interop.init_from`) are read
# through `flow_kwargs`; the run's `timesteps` is `num_train_timesteps`.
FLOW_SETTINGS = ("shift", "timestep_sampling", "logit_mean", "logit_std")


def flow_kwargs(values):
    """The `FlowMatchSchedule` arguments among `values`, a dict holding every
    name of `FLOW_SETTINGS` and `timesteps` (`None` for one not given)."""
    kwargs = {name: values[name] for name in FLOW_SETTINGS if values[name] is not None}
    if values.get("timesteps") is not None:
        kwargs["num_train_timesteps"] = values["timesteps"]
    return kwargs


@keras.saving.register_keras_serializable(package="keras_diffusion")
class FlowMatchSchedule:
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

    def add_noise(self, x0, noise, s):
        """(1 - s) * x0 + s * noise, NumPy float64; `s` broadcasts."""
        s = np.asarray(s, np.float64)
        return (1.0 - s) * np.asarray(x0, np.float64) + s * np.asarray(
            noise, np.float64
        )

    def velocity(self, x0, noise):
        """noise - x0: d x_s / ds, the network's target."""
        return np.asarray(noise, np.float64) - np.asarray(x0, np.float64)

    def get_config(self):
        return {
            "num_train_timesteps": self.num_train_timesteps,
            "shift": self.shift,
            "timestep_sampling": self.timestep_sampling,
            "logit_mean": self.logit_mean,
            "logit_std": self.logit_std,
            "mode_scale": self.mode_scale,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"FlowMatchSchedule({args})"
