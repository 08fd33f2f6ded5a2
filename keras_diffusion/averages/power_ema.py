"""Power-function EMA profiles (Karras et al., 2024, "Analyzing and Improving
the Training Dynamics of Diffusion Models", section 3.1 and appendix C).

A profile of exponent `gamma` averages the weights seen so far with a weight
that grows as a power of time: after `t` updates,

    theta_hat(t) = (gamma + 1) / t^(gamma + 1) * integral_0^t tau^gamma theta(tau) dtau,

so its length grows with the run. Its relative standard deviation (the width
of the averaging window over its length) is

    sigma_rel = (gamma + 1)^(1/2) / ((gamma + 2) (gamma + 3)^(1/2)).

On a run of updates `theta(1), ..., theta(t)`, held constant between them,
the integral is the sum

    theta_hat(t) = sum_i w_i(t) theta(i),
    w_i(t) = (i^(gamma+1) - (i-1)^(gamma+1)) / t^(gamma+1),

which is what the recursion

    theta_hat(t) = beta(t) theta_hat(t - 1) + (1 - beta(t)) theta(t),
    beta(t) = (1 - 1 / t)^(gamma + 1)

computes (`beta(1) = 0`: the first update replaces the average). The
recursion runs on the device, in `DiffusionModel.train_step`; `weights`
gives the sum's `w_i`, which `keras_diffusion.averages.posthoc`
combines to reconstruct any other profile after training.
"""

import keras
import numpy as np
from keras import ops

from keras_diffusion.averages.ema import (
    add_shadows,
    add_update_count,
    restart,
    step_toward,
)
from keras_diffusion.utils.checks import check_float

# EDM2's two tracked profiles: any sigma_rel between about 0.01 and 0.25
# is reconstructed from their snapshots.
DEFAULT_SIGMA_RELS = (0.05, 0.10)


def gamma_of(sigma_rel):
    """The exponent `gamma` of the profile of relative width `sigma_rel`.

    The largest real root of `(g + 2)^2 (g + 3) = (g + 1) / sigma_rel^2`,
    the width's definition squared: `g^3 + 7 g^2 + (16 - s) g + 12 - s = 0`
    with `s = sigma_rel^-2`.

    Raises:
        ValueError: `sigma_rel` is not in (0, 0.28): a profile's width
            is below `sigma_rel(gamma=-1) = 0` and at most about 0.2887
            (the uniform average, gamma = 0, has 1 / sqrt(12) = 0.2887;
            wider needs gamma < 0, whose early weights are unbounded).
    """
    sigma_rel = check_float("sigma_rel", sigma_rel, greater_than=0.0)
    if sigma_rel >= 0.28:
        raise ValueError(
            "Argument `sigma_rel` must be below 0.28 (a power-function "
            "profile is at most 0.2887 wide, the plain average of the run). "
            f"Received: sigma_rel={sigma_rel!r}"
        )
    s = sigma_rel**-2
    roots = np.roots([1.0, 7.0, 16.0 - s, 12.0 - s])
    return float(max(r.real for r in roots if abs(r.imag) < 1e-9))


def check_sigma_rels(name, value):
    """`value` (`None`, a width, or a non-empty list of widths that
    `gamma_of` takes) as a tuple of floats; `name` is the argument's."""
    if value is None:
        return None
    values = [value] if isinstance(value, (int, float)) else value
    problem = not isinstance(values, (list, tuple)) or not values
    if not problem:
        try:
            for sigma_rel in values:
                gamma_of(sigma_rel)
        except (TypeError, ValueError):
            problem = True
    if problem:
        raise ValueError(
            f"Argument `{name}` must be a list of relative widths in (0, 0.28), "
            f"e.g. [0.05, 0.1]. Received: {name}={value!r}"
        )
    return tuple(float(s) for s in values)


def sigma_rel_of(gamma):
    """The relative width of the profile of exponent `gamma` (> -1)."""
    gamma = float(gamma)
    return float(np.sqrt(gamma + 1.0) / ((gamma + 2.0) * np.sqrt(gamma + 3.0)))


def weights(gamma, t):
    """float64 `(t,)`: the weight of the weights after update `i = 1..t` in
    the profile of exponent `gamma` after `t` updates; they sum to 1."""
    steps = np.arange(t + 1, dtype=np.float64) / float(t)
    cumulative = steps ** (float(gamma) + 1.0)
    return np.diff(cumulative)


class PowerFunctionEMA(keras.layers.Layer):
    """Float32 power-function averages of weights, one per `sigma_rels` entry.

    The averages start equal to the live weights and are saved with the
    model's weights (its backups, its `.keras` file). Like
    `ExponentialMovingAverage`, its owner builds it again from its own config.

    Args:
        variables: list of variables to track.
        sigma_rels: relative widths of the profiles. Defaults to EDM2's
            `(0.05, 0.10)`.
    """

    def __init__(self, variables, sigma_rels=DEFAULT_SIGMA_RELS, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.sigma_rels = tuple(float(s) for s in sigma_rels)
        self.gammas = tuple(gamma_of(s) for s in self.sigma_rels)
        self.num_updates = add_update_count(self)
        self.profiles = [
            add_shadows(self, variables, f"profile_{k}")
            for k in range(len(self.gammas))
        ]
        self.built = True

    def update(self, variables, applied=None):
        """Moves every profile toward `variables` by one update.

        Args:
            variables: the tracked variables, in order.
            applied: optional bool tensor, whether the weights changed in
                this step (see `ExponentialMovingAverage.update`); `None`
                is always.
        """
        t = ops.cast(self.num_updates + 1, "float32")
        log_keep = ops.log1p(-1.0 / t)  # log(1 - 1/t); -inf at t = 1
        # 1 - beta = 1 - (1 - 1/t)^(gamma + 1), accurate for large t.
        rates = [-ops.expm1((gamma + 1.0) * log_keep) for gamma in self.gammas]
        step_toward(self, self.profiles, variables, rates, applied)

    def reset(self, variables):
        """Starts every profile again at `variables`, with no update counted."""
        restart(self, self.profiles, variables)

    def values(self):
        """NumPy float32 arrays: `[profile][variable]`."""
        return [[ops.convert_to_numpy(s) for s in shadows] for shadows in self.profiles]

    def updates(self):
        """The number of updates averaged, an int."""
        return int(ops.convert_to_numpy(self.num_updates))
