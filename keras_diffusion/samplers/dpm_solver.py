"""DPM-Solver++ 2M: a second-order multistep solver of the diffusion ODE."""

import keras
import numpy as np

from keras_diffusion.samplers.base import SPACING_OPTIONS, Sampler
from keras_diffusion.utils.checks import check_bool, check_choice

FINAL_SIGMAS_TYPES = ("zero", "sigma_min")


@keras.saving.register_keras_serializable(package="keras_diffusion")
class DPMSolverSampler(Sampler):
    """DPM-Solver++ 2M (midpoint), as diffusers' `DPMSolverMultistepScheduler`.

    The data-prediction multistep solver with `solver_order=2`,
    `solver_type="midpoint"` and `algorithm_type="dpmsolver++"`: the first
    step is first order (it has no previous x0), later steps extrapolate from
    the x0 of the two latest steps. The model sees the variance-preserving
    x_t, so the starting noise is used as is (diffusers' `init_noise_sigma`
    is 1).

    Args:
        num_steps: int in [1, T], the number of denoiser evaluations; at
            most T - 1 with "linspace" and "leading" spacing, which would
            repeat a timestep. Defaults to `20`.
        timestep_spacing: str, `"linspace"`, `"leading"` or `"trailing"`; as
            diffusers, "linspace" and "leading" space `num_steps + 1` points
            and drop the last (timestep 0). Defaults to `"linspace"`.
        steps_offset: int >= 0, added to the "leading" timesteps. Defaults
            to `0`.
        use_karras_sigmas: bool, space the noise levels as Karras et al.
            (2022), eq. (5), with rho = 7; the denoiser then gets the nearest
            (rounded) timesteps. Defaults to `False`.
        final_sigmas_type: str, the noise level after the last step: `"zero"`
            (a clean sample; the last step is then first order) or
            `"sigma_min"` (that of timestep 0). Defaults to `"zero"`.
        lower_order_final: bool, take the last step at first order when
            `num_steps < 15`, which stabilises few-step sampling. Defaults to
            `True`.

    On an `EDMSchedule` it is diffusers' `EDMDPMSolverMultistepScheduler`
    (order 2, "dpmsolver++", "midpoint") over the schedule's Karras sigmas:
    the denoiser gets `c_in * x` and `c_noise` and returns the raw network
    output, the starting noise is multiplied by sqrt(sigma_max**2 + 1), and
    `timestep_spacing`, `steps_offset` and `use_karras_sigmas` must keep
    their defaults.

    On a `FlowMatchSchedule` it is diffusers' `DPMSolverMultistepScheduler`
    with `use_flow_sigmas=True`, `flow_shift` the schedule's shift and
    `prediction_type="flow_prediction"`: alpha = 1 - s and sigma = s over
    the levels `shifted(1 - linspace(1, 1/T, num_steps + 1))` (the first
    below 1, the last dropped for 0), the denoiser gets x itself and those
    levels times T, truncated to integers as there, and returns the
    velocity; the options above other than `num_steps` and
    `lower_order_final` must keep their defaults.

    Example:

    ```python
    sampler = keras_diffusion.DPMSolverSampler(num_steps=20, use_karras_sigmas=True)
    model = keras_diffusion.DiffusionModel(unet, sampler=sampler)  # its default
    ```

    Reference:
        - [Lu et al., 2022, DPM-Solver++](https://arxiv.org/abs/2211.01095)
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    name = "dpm"

    def __init__(
        self,
        num_steps=20,
        timestep_spacing="linspace",
        steps_offset=0,
        use_karras_sigmas=False,
        final_sigmas_type="zero",
        lower_order_final=True,
    ):
        super().__init__(num_steps, timestep_spacing, steps_offset)
        self.use_karras_sigmas = check_bool("use_karras_sigmas", use_karras_sigmas)
        self.final_sigmas_type = check_choice(
            "final_sigmas_type", final_sigmas_type, FINAL_SIGMAS_TYPES
        )
        self.lower_order_final = check_bool("lower_order_final", lower_order_final)

    steps_on = {
        "vp": (),
        "sigma": SPACING_OPTIONS,
        "flow": (*SPACING_OPTIONS, "final_sigmas_type"),
    }

    def _plan(self, schedule):
        levels = schedule.sampling_levels(self._spacing("dpm", self.final_sigmas_type))
        # A repeated noise level among the steps makes a step h = 0, and the
        # next multistep ratio h / h_prev undefined: too many steps for the
        # spacing and T. (The final sigma may repeat the last: that step is 0.)
        sigmas = levels.sigma[:-1] / levels.alpha[:-1]
        if np.any(np.diff(sigmas) >= 0):
            t = schedule.output_tables(levels.reading, "epsilon")["t"]
            raise ValueError(
                f"Argument `num_steps` repeats noise levels with "
                f"timestep_spacing={self.timestep_spacing!r} on the "
                f"{schedule.name!r} process {schedule!r} (timesteps "
                f"{t.tolist()[:8]}...): use fewer steps or "
                "timestep_spacing='trailing'. "
                f"Received: num_steps={self.num_steps}"
            )
        return {
            **levels.reading,
            **self._updates(levels.alpha, levels.sigma),
            "init_sigma": levels.init_sigma,
        }

    def _updates(self, alphas, sigmas_state):
        """The update coefficients over n + 1 levels of the state
        x = alpha x0 + sigma n, in terms of sigma / alpha."""
        n = len(alphas) - 1
        sigmas = sigmas_state / alphas
        s0, s1 = sigmas[:-1], sigmas[1:]
        # 1. First order (DDIM in data prediction), DPM-Solver++ eq. (5) with
        # exp(-h) = sigma_next / sigma since lambda = -log(sigma).
        c_x = sigmas_state[1:] / sigmas_state[:-1]
        c_d = alphas[1:] * (1 - s1 / s0)
        # 2. Second order (2M, midpoint): D1 = (x0 - x0_prev) / r with
        # r = h_prev / h, applied with weight 1/2.
        second = np.arange(n) >= 1
        final_first = self.final_sigmas_type == "zero" or (
            self.lower_order_final and n < 15
        )
        second[-1] &= not final_first
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.log(s0 / s1)
            h_prev = np.log(np.append(np.inf, sigmas[:-2]) / s0)
            half_over_r = np.where(second, 0.5 * h / h_prev, 0.0)
        zeros = np.zeros_like(c_x)
        return {
            "c_x": c_x,
            "c_x0": c_d * (1 + half_over_r),
            "c_eps": zeros,
            "c_prev": -c_d * half_over_r,
            "c_noise": zeros,
        }
