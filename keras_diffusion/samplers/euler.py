"""Euler: the first-order solver of the probability-flow ODE in sigma."""

import keras
import numpy as np

from keras_diffusion.checks import check_bool
from keras_diffusion.samplers.base import (
    Sampler,
    karras_sigmas,
    sigma_to_t,
    spaced_timesteps,
    train_sigmas,
)


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

    Example:

    ```python
    sampler = keras_diffusion.EulerSampler(num_steps=30)
    x0 = sampler.sample(lambda x, t: model([x, t]), x_T, schedule)
    ```

    Reference:
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    def __init__(
        self,
        num_steps=30,
        timestep_spacing="linspace",
        steps_offset=0,
        use_karras_sigmas=False,
    ):
        super().__init__(num_steps, timestep_spacing, steps_offset)
        self.use_karras_sigmas = check_bool("use_karras_sigmas", use_karras_sigmas)

    def _sigmas(self, schedule):
        """Timesteps (float32) and the n + 1 sigmas, the last one zero."""
        T = schedule.num_train_timesteps
        all_sigmas = train_sigmas(schedule)
        t = spaced_timesteps(
            T,
            self.num_steps,
            self.timestep_spacing,
            self.steps_offset,
            round_linspace=False,
        )
        sigmas = np.interp(t, np.arange(T), all_sigmas)
        if self.use_karras_sigmas:
            sigmas = karras_sigmas(sigmas[-1], sigmas[0], self.num_steps)
            t = sigma_to_t(sigmas, np.log(all_sigmas))
        return t.astype(np.float32), np.append(sigmas, 0.0)

    def _timesteps(self, schedule):
        return self._sigmas(schedule)[0]

    def _plan(self, schedule):
        t, sigmas = self._sigmas(schedule)
        sigma, sigma_next = sigmas[:-1], sigmas[1:]
        scale = np.sqrt(sigma**2 + 1)
        init_sigma = sigmas.max()
        if self.timestep_spacing == "leading":
            init_sigma = np.sqrt(init_sigma**2 + 1)
        zeros = np.zeros_like(sigma)
        return {
            "t": t.astype(np.float64),
            "alpha": 1 / scale,
            "sigma": sigma / scale,
            "scale": scale,
            # x_next = x + (x - x0) / sigma * (sigma_next - sigma).
            "c_x": sigma_next / sigma,
            "c_x0": 1 - sigma_next / sigma,
            "c_eps": zeros,
            "c_prev": zeros,
            "c_noise": zeros,
            "init_sigma": init_sigma,
        }

    def get_config(self):
        return {**super().get_config(), "use_karras_sigmas": self.use_karras_sigmas}
