"""DDPM: ancestral sampling of the reverse process."""

import keras
import numpy as np

from keras_diffusion.samplers.base import vp_levels
from keras_diffusion.samplers.vp_base import VPSampler
from keras_diffusion.utils.checks import check_choice

# diffusers' `DDPMScheduler.variance_type`s without a learned variance;
# "fixed_small_log" is "fixed_small" by another road (exp of half its log).
VARIANCE_TYPES = ("fixed_small", "fixed_small_log", "fixed_large")


@keras.saving.register_keras_serializable(package="keras_diffusion")
class DDPMSampler(VPSampler):
    """Ancestral DDPM sampler, equal to diffusers' `DDPMScheduler`.

    Each step samples x_prev from the posterior q(x_prev | x_t, x0) with the
    model's x0 and, by default, the "fixed_small" variance (the posterior
    variance). With
    fewer steps than T it respaces like diffusers' `set_timesteps`: the
    previous timestep is the next one of the list, and each step's beta is
    `1 - alphas_cumprod[t] / alphas_cumprod[t_prev]`. No noise is added at
    timestep 0.

    Args:
        num_steps: int in [1, T], or `None` for all T timesteps. Defaults to
            `None`.
        timestep_spacing: str, `"leading"`, `"trailing"` or `"linspace"`
            (Lin et al., 2024, Table 2). Defaults to `"leading"`.
        steps_offset: int >= 0, added to the "leading" timesteps. Defaults
            to `0`.
        clip_sample: bool, clip the predicted x0 to
            `[-clip_sample_range, clip_sample_range]` (diffusers defaults to
            `True`). Defaults to `False`.
        clip_sample_range: float > 0. Defaults to `1.0`.
        variance_type: str, the variance of each step's noise: `"fixed_small"`
            (the posterior variance, Ho et al.'s sigma^2 = beta-tilde),
            `"fixed_large"` (the step's beta), or `"fixed_small_log"` (the
            same numbers as `"fixed_small"`, diffusers' other name).
            Defaults to `"fixed_small"`.

    Example:

    ```python
    # All T steps, a fresh draw of noise at each: by its name.
    images = model.generate(16, sampler="ddpm", seed=0)
    ```

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    name = "ddpm"

    def __init__(
        self,
        num_steps=None,
        timestep_spacing="leading",
        steps_offset=0,
        clip_sample=False,
        clip_sample_range=1.0,
        variance_type="fixed_small",
    ):
        super().__init__(
            1 if num_steps is None else num_steps, timestep_spacing, steps_offset
        )
        self.num_steps = num_steps if num_steps is None else self.num_steps
        self._set_clip(clip_sample, clip_sample_range)
        self.variance_type = check_choice(
            "variance_type", variance_type, VARIANCE_TYPES
        )

    def _steps_for(self, schedule):
        return self.num_steps or schedule.num_train_timesteps

    def _plan(self, schedule):
        abar_all = schedule.alphas_cumprod_float64
        t = self._spaced_timesteps(schedule)
        abar = abar_all[t]
        abar_prev = np.append(abar_all[t[1:]], 1.0)
        alpha_t = abar / abar_prev
        beta_t = 1 - alpha_t
        # 1. Posterior variance, eq. (7), floored as diffusers does; or the
        # step's beta ("fixed_large", sigma^2 = beta of Ho et al., Sec. 3.2).
        variance = np.maximum((1 - abar_prev) / (1 - abar) * beta_t, 1e-20)
        if self.variance_type == "fixed_large":
            variance = beta_t
        zeros = np.zeros_like(abar)
        return {
            **vp_levels(t, abar),
            # 2. Posterior mean, eq. (7): coefficients of x0 and x_t.
            "c_x": np.sqrt(alpha_t) * (1 - abar_prev) / (1 - abar),
            "c_x0": np.sqrt(abar_prev) * beta_t / (1 - abar),
            "c_eps": zeros,
            "c_prev": zeros,
            "c_noise": np.where(t > 0, np.sqrt(variance), 0.0),
            "init_sigma": 1.0,
        }
