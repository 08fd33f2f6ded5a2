"""Multistep consistency sampling: one model call, or a few from fresh noise."""

import keras
import numpy as np

from keras_diffusion.samplers.base import Sampler
from keras_diffusion.utils.checks import check_float


@keras.saving.register_keras_serializable(package="keras_diffusion")
class ConsistencySampler(Sampler):
    """The sampler of a `ConsistencySchedule`: a clean sample per call.

    Each step evaluates the network once at level s and takes its one-call
    estimate x0 = x - s F; every step but the last noises that estimate
    afresh to the next level, x = (1 - s_next) x0 + s_next z (Song et al.,
    2023, Algorithm 1). One step maps the noise to a sample in one call;
    more steps trade calls for quality. Classifier-free guidance, when a
    caller asks for it, takes two calls a step (the conditional and the
    unconditional output).

    Args:
        num_steps: int >= 1, the model calls. Defaults to `2`.
        levels: optional sequence of `num_steps` noise levels in (0, 1],
            decreasing, the first where sampling starts (1 is pure noise).
            `None` spaces them evenly from 1: `1, 1 - 1/n, ..., 1/n`.
            Defaults to `None`.

    Example:

    ```python
    sampler = keras_diffusion.samplers.ConsistencySampler(num_steps=1)
    images = model.generate(16, sampler=sampler, seed=0)
    ```

    Reference:
        - [Song et al., 2023](https://arxiv.org/abs/2303.01469)
    """

    name = "consistency"
    # It steps on the consistency family alone.
    steps_on = {"consistency": ()}

    def __init__(self, num_steps=2, levels=None):
        super().__init__(num_steps, "linspace")
        self.levels = None if levels is None else self._check_levels(levels)

    def _check_levels(self, levels):
        if isinstance(levels, (str, bytes)) or not hasattr(levels, "__len__"):
            raise TypeError(
                "Argument `levels` must be a sequence of floats. "
                f"Received: levels={levels!r}"
            )
        values = [
            check_float("levels", v, greater_than=0.0, maximum=1.0) for v in levels
        ]
        if len(values) != self.num_steps or np.any(np.diff(values) >= 0):
            raise ValueError(
                f"Argument `levels` must hold num_steps={self.num_steps} "
                f"decreasing levels in (0, 1]. Received: levels={list(levels)!r}"
            )
        return tuple(values)

    def noise_levels(self):
        """The float64 levels the network is evaluated at, largest first."""
        if self.levels is not None:
            return np.asarray(self.levels, np.float64)
        return np.linspace(1.0, 0.0, self.num_steps + 1)[:-1]

    def _plan(self, schedule):
        # x_next = (1 - s_next) x0 + s_next z, and x0 after the last step.
        return self._level_steps(schedule, fresh_noise=True)

    def _level_steps(self, schedule, fresh_noise):
        """The plan of steps down `noise_levels()`, each to the next level
        (the last to 0) as x_next = (1 - s_next) x0 + s_next n, with n fresh
        noise (`fresh_noise`) or the step's own noise estimate."""
        levels = self.noise_levels()
        following = np.append(levels[1:], 0.0)
        zeros = np.zeros_like(levels)
        return {
            "sigma": levels,
            "c_x": zeros,
            "c_x0": 1.0 - following,
            "c_eps": zeros if fresh_noise else following,
            "c_prev": zeros,
            "c_noise": following if fresh_noise else zeros,
            "init_sigma": schedule.init_sigma,
        }

    def get_config(self):
        levels = None if self.levels is None else list(self.levels)
        return {"num_steps": self.num_steps, "levels": levels}
