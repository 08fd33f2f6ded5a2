"""The objective of a variance-preserving process: what its network
predicts (its prediction type) and how its loss is weighted, as
`NoiseSchedule` holds them, as diffusers' schedulers hold `prediction_type`.
"""

import warnings

import numpy as np
from keras import ops

# The objective a `NoiseSchedule` trains with where none is given.
DEFAULTS = {
    "prediction_type": "epsilon",
    "loss_weighting": "none",
    "min_snr_gamma": 5.0,
}


def changes(config, replace, **objective):
    """The settings of `objective` (`None`: not given) that differ from a
    schedule's `config`, by name.

    Raises:
        ValueError: with `replace` false, a setting given where the schedule
            holds another value than its default, both named.
    """
    given = {
        name: value
        for name, value in objective.items()
        if value is not None and value != config[name]
    }
    for name, value in given.items():
        if not replace and config[name] != DEFAULTS[name]:
            raise ValueError(
                f"Argument `{name}` differs from the schedule's {name}: set "
                f"it in one place. Received: {name}={value!r}, "
                f"schedule.{name}={config[name]!r}"
            )
    return given


def min_snr_weight(snr, prediction_type, gamma):
    """Min-SNR-gamma (Hang et al., 2023): the weight min(snr, gamma) of the
    x0 loss, expressed for the loss of `prediction_type` at `snr`."""
    clipped = ops.minimum(snr, gamma)
    if prediction_type == "epsilon":
        return clipped / ops.maximum(snr, 1e-8)
    if prediction_type == "v_prediction":
        return clipped / (snr + 1.0)
    return clipped


def warn_zero_terminal(last, weight, prediction_type, min_snr_gamma):
    """Warns that Min-SNR weighting gives the last timestep `last` of a
    zero-terminal-SNR schedule the loss weight `weight` (0)."""
    warnings.warn(
        "Min-SNR weighting (loss_weighting='min_snr') with "
        f"rescale_zero_terminal_snr=True gives t={last}, whose SNR is 0, "
        f"the loss weight {weight:g}: the network never trains at the "
        "level sampling starts from. Use loss_weighting='none' with a "
        f"zero-terminal-SNR schedule. Received: prediction_type="
        f"{prediction_type!r}, min_snr_gamma={min_snr_gamma}",
        stacklevel=4,
    )


def output_coefficients(prediction_type, alpha, sigma, k):
    """`(x0_x, x0_out, eps_x, eps_out)`: x0 = x0_x x + x0_out out and eps =
    eps_x x + eps_out out of a network output `out` of `prediction_type`,
    with x = k x_t and x_t = alpha x0 + sigma eps (float64 tables)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if prediction_type == "epsilon":
            return (1.0 / (k * alpha), -sigma / alpha, 0.0 * k, 1.0 + 0.0 * k)
        if prediction_type == "sample":
            return (0.0 * k, 1.0 + 0.0 * k, 1.0 / (k * sigma), -alpha / sigma)
        # v = alpha * eps - sigma * x0 (Salimans & Ho, 2022)
        return (alpha / k, -sigma, sigma / k, alpha)
