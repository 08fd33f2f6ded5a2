"""The betas of a variance-preserving schedule, by name, as diffusers'
`DDPMScheduler` computes them, and their zero-terminal-SNR rescaling."""

import math

import numpy as np

BETA_SCHEDULES = ("linear", "scaled_linear", "cosine", "squaredcos_cap_v2", "sigmoid")


def _betas_for_alpha_bar(num_timesteps, max_beta=0.999):
    # Nichol & Dhariwal (2021), eq. (17), as diffusers' `betas_for_alpha_bar`.
    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = [
        min(
            1.0 - alpha_bar((i + 1) / num_timesteps) / alpha_bar(i / num_timesteps),
            max_beta,
        )
        for i in range(num_timesteps)
    ]
    return np.asarray(betas, dtype=np.float64)


def rescale_betas_zero_snr(betas):
    """Rescales betas so that the last timestep has zero SNR.

    Lin et al. (2024), "Common Diffusion Noise Schedules and Sample Steps are
    Flawed", Algorithm 1, as in diffusers.

    Args:
        betas: float64 NumPy array of betas.

    Returns:
        float64 NumPy array of rescaled betas; the last one is 1.
    """
    alphas_bar_sqrt = np.sqrt(np.cumprod(1.0 - betas))
    first, last = alphas_bar_sqrt[0], alphas_bar_sqrt[-1]
    alphas_bar_sqrt = (alphas_bar_sqrt - last) * first / (first - last)
    alphas_bar = alphas_bar_sqrt**2
    alphas = np.concatenate([alphas_bar[:1], alphas_bar[1:] / alphas_bar[:-1]])
    return 1.0 - alphas


def named_betas(beta_schedule, num_timesteps, beta_start, beta_end):
    """The float64 betas of the schedule `beta_schedule` (`BETA_SCHEDULES`)."""
    T = num_timesteps
    if beta_schedule == "linear":
        return np.linspace(beta_start, beta_end, T, dtype=np.float64)
    if beta_schedule == "scaled_linear":
        return np.linspace(beta_start**0.5, beta_end**0.5, T, dtype=np.float64) ** 2
    if beta_schedule == "sigmoid":
        ramp = 1.0 / (1.0 + np.exp(-np.linspace(-6.0, 6.0, T, dtype=np.float64)))
        return ramp * (beta_end - beta_start) + beta_start
    return _betas_for_alpha_bar(T)


def check_trained_betas(trained_betas, num_train_timesteps):
    """`trained_betas` as a list of floats, or `None`."""
    if trained_betas is None:
        return None
    try:
        trained = np.asarray(trained_betas, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            "Argument `trained_betas` must be a sequence of floats. "
            f"Received: trained_betas={trained_betas!r}"
        ) from error
    if trained.shape != (num_train_timesteps,):
        raise ValueError(
            "Argument `trained_betas` must have shape "
            f"({num_train_timesteps},). Received: shape {trained.shape}"
        )
    if not np.all((trained > 0.0) & (trained < 1.0)):
        raise ValueError(
            "Argument `trained_betas` must lie in (0, 1). Received: "
            f"min={trained.min()}, max={trained.max()}"
        )
    return [float(b) for b in trained]
