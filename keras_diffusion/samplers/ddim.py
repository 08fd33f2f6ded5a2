"""DDIM: denoising diffusion implicit models (deterministic for eta = 0)."""

import keras
import numpy as np

from keras_diffusion.samplers.base import vp_levels
from keras_diffusion.samplers.vp_base import VPSampler
from keras_diffusion.utils.checks import check_bool, check_choice, check_float

# Where a step lands: diffusers' `t - T // num_steps`, or the next timestep of
# the list (this sampler's rule before the option, kept for saved samplers).
PREVIOUS_TIMESTEPS = ("diffusers", "next_listed")


def ddim_plan(t, abar, abar_prev, eta):
    """The plan of DDIM steps from timesteps `t` (alphas_cumprod `abar`) to
    the levels `abar_prev` with stochasticity `eta` (Song et al., 2021)."""
    # 1. sigma_t(eta) of eq. (16): eta * sqrt of the DDPM posterior variance.
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = (1 - abar_prev) / (1 - abar) * (1 - abar / abar_prev)
    std = eta * np.sqrt(variance)
    zeros = np.zeros_like(abar)
    return {
        **vp_levels(t, abar),
        # 2. Eq. (12): x_prev = sqrt(abar_prev) x0 + sqrt(1 - abar_prev -
        # sigma_t^2) eps + sigma_t z.
        "c_x": zeros,
        "c_x0": np.sqrt(abar_prev),
        "c_eps": np.sqrt(np.maximum(1 - abar_prev - std**2, 0.0)),
        "c_prev": zeros,
        "c_noise": std,
        "init_sigma": 1.0,
    }


@keras.saving.register_keras_serializable(package="keras_diffusion")
class DDIMSampler(VPSampler):
    """DDIM sampler, equal to diffusers' `DDIMScheduler` for the same options.

    Each step predicts x0 and eps from the model output and jumps along the
    DDIM update (Song et al., eq. (12)) to a lower timestep, or to
    `final_alpha_cumprod` past timestep 0. By default that timestep is
    diffusers' `t - T // num_steps`, as `DDIMScheduler.step` takes it. For
    "linspace" spacing, for "trailing" when `num_steps` does not divide T,
    and for "leading" when `steps_offset >= T // num_steps`, it is not the
    next timestep of the list: `previous_timestep="next_listed"` steps to the
    next one instead (the rule of this sampler before the option, which a
    saved sampler without the option keeps). Where diffusers' own list is
    wrong ("trailing" spacing ends at timestep -1 for 62 of the step counts
    of T = 1000), this sampler keeps the valid timesteps and warns once:
    docs/interop.md, "Known differences".

    Args:
        num_steps: int in [1, T], the number of denoiser evaluations.
            Defaults to `50`.
        eta: float >= 0, the weight of the fresh noise: 0 is deterministic
            DDIM, 1 is DDPM-like ancestral sampling. Defaults to `0.0`.
        timestep_spacing: str, `"leading"`, `"trailing"` or `"linspace"`
            (Lin et al., 2024, Table 2). Defaults to `"leading"`.
        steps_offset: int >= 0, added to the "leading" timesteps. Defaults
            to `0`.
        clip_sample: bool, clip the predicted x0 to
            `[-clip_sample_range, clip_sample_range]`. diffusers defaults to
            `True`; here it is off because it distorts latent and
            v-prediction models. Defaults to `False`.
        clip_sample_range: float > 0. Defaults to `1.0`.
        set_alpha_to_one: bool, after the last step use alphas_cumprod = 1
            (a clean sample) rather than alphas_cumprod[0]. Defaults to `True`.
        previous_timestep: str, where each step lands: `"diffusers"`
            (`t - T // num_steps`, diffusers' `DDIMScheduler.step`) or
            `"next_listed"` (the next timestep of the list). A config saved
            without it (`from_config`) means `"next_listed"`, the rule it was
            saved with. Defaults to `"diffusers"`.

    Example:

    ```python
    # Redraw images at strength 0.6: noised to where the last 30 of 50 steps
    # begin, then sampled back over those 30.
    redrawn = model.img2img(images, 0.6, sampler=keras_diffusion.DDIMSampler(50))
    ```

    Reference:
        - [Song et al., 2021](https://arxiv.org/abs/2010.02502)
    """

    name = "ddim"

    def __init__(
        self,
        num_steps=50,
        eta=0.0,
        timestep_spacing="leading",
        steps_offset=0,
        clip_sample=False,
        clip_sample_range=1.0,
        set_alpha_to_one=True,
        previous_timestep="diffusers",
    ):
        super().__init__(num_steps, timestep_spacing, steps_offset)
        self.eta = check_float("eta", eta, minimum=0.0)
        self._set_clip(clip_sample, clip_sample_range)
        self.set_alpha_to_one = check_bool("set_alpha_to_one", set_alpha_to_one)
        self.previous_timestep = check_choice(
            "previous_timestep", previous_timestep, PREVIOUS_TIMESTEPS
        )

    def previous_timesteps(self, schedule):
        """The timestep each step lands on, as a NumPy int64 array; -1 is
        past timestep 0 (`final_alpha_cumprod`)."""
        self.validate(schedule)
        return self._previous(schedule, self._spaced_timesteps(schedule))

    def _previous(self, schedule, t):
        if self.previous_timestep == "next_listed":
            return np.append(t[1:], -1)
        # diffusers' DDIMScheduler.step, whatever the spacing.
        return np.maximum(t - schedule.num_train_timesteps // self.num_steps, -1)

    def _plan(self, schedule):
        abar_all = schedule.alphas_cumprod_float64
        t = self._spaced_timesteps(schedule)
        final = 1.0 if self.set_alpha_to_one else abar_all[0]
        abar = abar_all[t]
        t_prev = self._previous(schedule, t)
        abar_prev = np.where(t_prev >= 0, abar_all[np.maximum(t_prev, 0)], final)
        return ddim_plan(t, abar, abar_prev, self.eta)

    @classmethod
    def from_config(cls, config):
        # Saved before the option existed: those samplers stepped to the next
        # listed timestep, and their files must keep generating the same images.
        return cls(**{"previous_timestep": "next_listed", **config})
