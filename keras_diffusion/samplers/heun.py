"""Heun: the second-order solver of the probability-flow ODE in sigma."""

import keras
import numpy as np

from keras_diffusion.samplers.base import SPACING_OPTIONS, Sampler
from keras_diffusion.utils.checks import check_bool


def heun_plan(sigmas, velocity=False):
    """Heun's update tables over `sigmas` (n + 1 levels, the last may be 0).

    Step k evaluates at sigma_k and takes an Euler step to sigma_{k+1};
    unless sigma_{k+1} is 0, it evaluates there too and restarts from
    sigma_k with the mean of the two slopes (Karras et al., 2022,
    Algorithm 1). The corrector is written on the predicted x and its x0,
    the x its step started from (`c_xprev`) and that x's x0 (`c_prev`).
    The state is x0 + sigma n or flow's (1 - s) x0 + s n: on both the slope
    is (x - x0) / sigma. With `velocity` (the network returns that slope,
    `Levels.reads_velocity`), the corrector's second slope is n' - x0'
    (`c_eps`, `c_x0`), which does not divide by a small sigma_{k+1} as
    (x' - x0') / sigma_{k+1} does.

    Returns:
        dict of float64 arrays, one entry an evaluation (2n - 1 when only
        the last level is 0): `row`, the index of the level it is made at,
        and the update coefficients `c_x`, `c_x0`, `c_eps`, `c_prev`,
        `c_xprev`.
    """
    rows = []
    for k, (s, s_next) in enumerate(zip(sigmas[:-1], sigmas[1:], strict=True)):
        ratio = s_next / s
        # 1. Euler: x' = x + (s_next - s) d, with d = (x - x0) / s.
        rows.append((k, ratio, 1.0 - ratio, 0.0, 0.0, 0.0))
        if s_next > 0:
            # 2. Heun: x + (s_next - s) (d + d') / 2, d' = (x' - x0') / s_next.
            half = (s_next - s) / 2.0
            if velocity:  # d' = n' - x0'
                rows.append((k + 1, 0.0, -half, half, -half / s, 1.0 + half / s))
            else:
                rows.append(
                    (
                        k + 1,
                        half / s_next,
                        -half / s_next,
                        0.0,
                        -half / s,
                        1.0 + half / s,
                    )
                )
    columns = [np.asarray(c, np.float64) for c in zip(*rows, strict=True)]
    names = ("row", "c_x", "c_x0", "c_eps", "c_prev", "c_xprev")
    return dict(zip(names, columns, strict=True))


def on_state(plan, alpha):
    """`heun_plan`'s tables on x / alpha, written on the state x = alpha
    (x0 + sigma / alpha n): each row's x is at its level, x_next at the
    level it steps to, and a corrector's `x_prev` at the level before."""
    plan = dict(plan)
    corrector = plan["c_xprev"] != 0.0
    now = plan["row"].astype(np.int64)
    to = now + ~corrector
    a_to = alpha[to]
    plan["c_x"] = plan["c_x"] * a_to / alpha[now]
    plan["c_xprev"] = plan["c_xprev"] * a_to / alpha[to - 1]
    for key in ("c_x0", "c_eps", "c_prev"):
        plan[key] = plan[key] * a_to
    return plan


@keras.saving.register_keras_serializable(package="keras_diffusion")
class HeunSampler(Sampler):
    """Heun sampler, as diffusers' pipelines run `HeunDiscreteScheduler`.

    Each step takes an Euler step of dx/dsigma = (x - x0) / sigma for the
    unscaled sample x = x_t / alpha_t, evaluates the model at its end and
    averages the two slopes; the last step, to sigma 0, stays an Euler step
    (Karras et al., 2022, Algorithm 1). So `num_steps` steps cost
    `2 * num_steps - 1` model calls. The timesteps, sigmas, model input
    scaling and starting noise are those of `EulerSampler`, each timestep
    after the first taken twice.

    On a schedule whose last noise level is very high (cosine, T=1000: sigma
    2.0e4) the default `"linspace"` spacing's first step falls to sigma ~6,
    and Heun's correction multiplies the denoiser's error there by ~3,500:
    samples diverge, as they do with diffusers' scheduler. Use
    `use_karras_sigmas=True` there (docs/quality.md, "EDM and Heun").

    On an `EDMSchedule` it is Algorithm 1 over the schedule's Karras sigmas:
    the denoiser gets `c_in * x` and `c_noise` and returns the raw network
    output, the starting noise is multiplied by sqrt(sigma_max**2 + 1) (as
    diffusers' EDM schedulers), and the options below other than
    `num_steps` must keep their defaults. On a `FlowMatchSchedule` it is
    diffusers' `FlowMatchHeunDiscreteScheduler` (same `shift`, same steps)
    over the schedule's `sigmas(num_steps)`: the denoiser gets x itself and
    s * T and returns the velocity, with the same options kept at defaults.

    Args:
        num_steps: int in [1, T], the number of steps (`2 * num_steps - 1`
            model calls). Defaults to `18`.
        timestep_spacing, steps_offset, use_karras_sigmas: as
            `EulerSampler`'s, whose timesteps and sigmas these are.
        clip_sample: bool, clip the predicted x0 to
            `[-clip_sample_range, clip_sample_range]`. Defaults to `False`.
        clip_sample_range: float > 0. Defaults to `1.0`.

    Example:

    ```python
    # 18 steps, 35 calls of the network: the last step is Euler's.
    images = model.generate(16, sampler=keras_diffusion.samplers.HeunSampler(18))
    ```

    Reference:
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    name = "heun"

    steps_on = {
        "vp": (),
        "sigma": (*SPACING_OPTIONS, "clip_sample", "clip_sample_range"),
        "flow": (*SPACING_OPTIONS, "clip_sample", "clip_sample_range"),
    }
    evaluations_per_step = 2

    def __init__(
        self,
        num_steps=18,
        timestep_spacing="linspace",
        steps_offset=0,
        use_karras_sigmas=False,
        clip_sample=False,
        clip_sample_range=1.0,
    ):
        super().__init__(num_steps, timestep_spacing, steps_offset)
        self.use_karras_sigmas = check_bool("use_karras_sigmas", use_karras_sigmas)
        self._set_clip(clip_sample, clip_sample_range)

    def _plan(self, schedule):
        # Euler's levels, each after the first evaluated twice.
        levels = schedule.sampling_levels(self._spacing())
        if levels.reads_velocity:
            # Flow's path, stepped in s on the state itself, as diffusers'
            # `FlowMatchHeunDiscreteScheduler`.
            plan = heun_plan(levels.sigma, velocity=True)
        else:
            # k-diffusion's: on x / alpha = x0 + (sigma / alpha) n.
            plan = on_state(heun_plan(levels.sigma / levels.alpha), levels.alpha)
        rows = plan.pop("row").astype(np.int64)
        return {
            **{key: np.asarray(v)[rows] for key, v in levels.reading.items()},
            **plan,
            "c_noise": np.zeros(len(rows)),
            "init_sigma": levels.init_sigma,
        }
