"""Euler: the first-order solver of the probability-flow ODE in sigma."""

import keras
import numpy as np

from keras_diffusion.samplers.base import SPACING_OPTIONS, Sampler
from keras_diffusion.utils.checks import check_bool, check_float

# Karras et al.'s churn, which steps on x0 + sigma n with a preconditioned
# denoiser (a "sigma" process) only.
CHURN_OPTIONS = ("s_churn", "s_tmin", "s_tmax", "s_noise")


@keras.saving.register_keras_serializable(package="keras_diffusion")
class EulerSampler(Sampler):
    """Euler sampler, as diffusers' pipelines run `EulerDiscreteScheduler`.

    The sampler integrates dx/dsigma = (x - x0) / sigma for the unscaled
    sample x = x_t / alpha_t (Karras et al., 2022, Algorithm 1 without
    churn). The sigmas are interpolated at the spaced timesteps, which are
    fractional for "linspace" spacing and Karras sigmas; the denoiser gets
    those fractional timesteps and the variance-preserving input
    x / sqrt(sigma**2 + 1) (`scale_model_input`). The unit starting noise is
    multiplied by diffusers' `init_noise_sigma`: the largest sigma, or
    sqrt(sigma_max**2 + 1) for "leading" spacing.

    Args:
        num_steps: int in [1, T], the number of denoiser evaluations.
            Defaults to `30`.
        timestep_spacing: str, `"linspace"`, `"leading"` or `"trailing"`
            (Lin et al., 2024, Table 2). Defaults to `"linspace"`.
        steps_offset: int >= 0, added to the "leading" timesteps. Defaults
            to `0`.
        use_karras_sigmas: bool, respace the noise levels between the first
            and last sigma as Karras et al. (2022), eq. (5), rho = 7.
            Defaults to `False`.
        s_churn: float >= 0, on an `EDMSchedule` only: the stochasticity of
            Karras et al.'s Algorithm 2, gamma = min(s_churn / num_steps,
            sqrt(2) - 1) at the steps with sigma in [s_tmin, s_tmax]. As
            diffusers' `EDMEulerScheduler.step`, the network is evaluated at
            sigma before the noise is added and its output is read at the
            raised sigma_hat = sigma (1 + gamma). Defaults to `0.0`.
        s_tmin: float >= 0, the smallest sigma that gets churn. Defaults to
            `0.0`.
        s_tmax: optional float, the largest sigma that gets churn; `None`
            is no bound. Defaults to `None`.
        s_noise: float >= 0, the scale of the churn noise. Defaults to `1.0`.

    On an `EDMSchedule` it steps over the schedule's Karras sigmas to 0, as
    diffusers' `EDMEulerScheduler`: the denoiser gets `c_in * x` and
    `c_noise` and returns the raw network output, the starting noise is
    multiplied by sqrt(sigma_max**2 + 1), and `timestep_spacing`,
    `steps_offset` and `use_karras_sigmas` must keep their defaults.

    On a `FlowMatchSchedule` it is diffusers' `FlowMatchEulerDiscreteScheduler`
    (same `shift`, same steps): x_next = x + (s_next - s) v over the
    schedule's `sigmas(num_steps)` and a final 0, the denoiser gets x itself
    and s * T and returns the velocity v; the options other than
    `num_steps` must keep their defaults.

    Example:

    ```python
    model = keras_diffusion.DiffusionModel(unet, schedule=keras_diffusion.EDMSchedule())
    # Stochastic Euler: Karras et al.'s churn, where sigma is at most 50.
    euler = keras_diffusion.EulerSampler(num_steps=30, s_churn=40.0, s_tmax=50.0)
    images = model.generate(16, sampler=euler, seed=0)
    ```

    Reference:
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    name = "euler"

    def __init__(
        self,
        num_steps=30,
        timestep_spacing="linspace",
        steps_offset=0,
        use_karras_sigmas=False,
        s_churn=0.0,
        s_tmin=0.0,
        s_tmax=None,
        s_noise=1.0,
    ):
        super().__init__(num_steps, timestep_spacing, steps_offset)
        self.use_karras_sigmas = check_bool("use_karras_sigmas", use_karras_sigmas)
        self.s_churn = check_float("s_churn", s_churn, minimum=0.0)
        self.s_tmin = check_float("s_tmin", s_tmin, minimum=0.0)
        if s_tmax is not None:
            s_tmax = check_float("s_tmax", s_tmax, minimum=self.s_tmin)
        self.s_tmax = s_tmax
        self.s_noise = check_float("s_noise", s_noise, minimum=0.0)

    steps_on = {
        "vp": (),
        "sigma": SPACING_OPTIONS,
        "flow": (*SPACING_OPTIONS, *CHURN_OPTIONS),
    }

    def check_process(self, schedule):
        super().check_process(schedule)
        if schedule.sampler_family != "sigma" and self.s_churn != 0.0:
            raise ValueError(
                'Argument `s_churn` applies on a "sigma" process (an '
                "EDMSchedule) only; elsewhere the Euler sampler is deterministic. "
                f"Received: s_churn={self.s_churn}"
            )

    def _plan(self, schedule):
        levels = schedule.sampling_levels(self._spacing())
        alpha, sigma = levels.alpha[:-1], levels.sigma[:-1]
        alpha_next, sigma_next = levels.alpha[1:], levels.sigma[1:]
        # 1. Churn, Algorithm 2: x_hat = x + s_noise sqrt(sigma_hat^2 - sigma^2) z.
        n = self.num_steps
        s_tmax = np.inf if self.s_tmax is None else self.s_tmax
        churned = (sigma >= self.s_tmin) & (sigma <= s_tmax)
        gamma = np.where(churned, min(self.s_churn / n, np.sqrt(2.0) - 1.0), 0.0)
        sigma_hat = sigma * (1.0 + gamma)
        # 2. Euler from sigma_hat, x_next = x + (sigma_next - sigma_hat) (x -
        # x0) / sigma_hat, on the path's state: x_next = r x + (alpha_next -
        # alpha r) x0 (DDIM's step, whatever the path).
        ratio = sigma_next / sigma_hat
        plan = {
            **levels.reading,
            "c_x": ratio,
            "c_x0": alpha_next - alpha * ratio,
            "c_eps": np.zeros_like(ratio),
            "c_prev": np.zeros_like(ratio),
            "c_noise": np.zeros_like(ratio),
            "init_sigma": levels.init_sigma,
        }
        if self.s_churn:
            # The network is evaluated at sigma (before the churn noise) and
            # read at sigma_hat, as diffusers' `EDMEulerScheduler.step`:
            # x0(x_hat) = x0(x) + c_skip(sigma_hat) rise z.
            rise = self.s_noise * np.sqrt(sigma_hat**2 - sigma**2)
            c_skip = schedule.preconditioning(sigma_hat)[0]
            plan["c_noise"] = rise * (ratio + (1.0 - ratio) * c_skip)
            plan["sigma_out"] = sigma_hat
        return plan
