"""A VP schedule's answer to the samplers: its timesteps and sigmas, as diffusers.

diffusers' discrete schedulers step over the sigmas sqrt((1 - abar) / abar)
of `alphas_cumprod` at the timesteps of their spacing options. Euler and Heun
(`EulerDiscreteScheduler`, `HeunDiscreteScheduler`) keep the sample
x_t / sqrt(abar) = x0 + sigma n and give the network fractional timesteps;
DPM-Solver (`DPMSolverMultistepScheduler`) keeps x_t itself and gives it
integer ones. `NoiseSchedule.sampling_levels` answers each with these
functions; DDPM and DDIM take the spaced timesteps alone.
"""

import numpy as np

from keras_diffusion.schedules import diffusers_lists
from keras_diffusion.schedules.levels import Levels

TIMESTEP_SPACINGS = ("leading", "trailing", "linspace")


def spaced_timesteps(
    num_train_timesteps, num_steps, spacing, steps_offset=0, round_linspace=True
):
    """The descending timesteps of diffusers' `set_timesteps` for each spacing.

    Table 2 of Lin et al. (2024): "leading" is `arange(n) * (T // n) + offset`,
    "trailing" is `round(T - arange(n) * T / n) - 1` (it starts at T - 1) and
    "linspace" is `linspace(0, T - 1, n)`, rounded for the discrete samplers.
    Where diffusers' float error gives it another "trailing" list, this one
    is kept and a warning says so, once (`schedules.diffusers_lists`).

    Args:
        num_train_timesteps: int, T.
        num_steps: int, n.
        spacing: str, one of `"leading"`, `"trailing"`, `"linspace"`.
        steps_offset: int, added to the "leading" timesteps.
        round_linspace: bool, round the "linspace" timesteps to integers.

    Returns:
        float64 NumPy array of n timesteps, largest first.
    """
    T, n = num_train_timesteps, num_steps
    if spacing == "linspace":
        t = np.linspace(0, T - 1, n)
        t = t.round() if round_linspace else t.astype(np.float32)
    elif spacing == "leading":
        t = np.arange(n) * (T // n) + steps_offset
    else:
        t = np.round(T - np.arange(n)[::-1] * (T / n)) - 1
        diffusers_lists.warn_trailing_difference(T, n, t[::-1])
    return np.asarray(t[::-1], dtype=np.float64)


def check_steps(num_train_timesteps, num_steps):
    """Raises unless `num_steps` fits in the schedule's T timesteps."""
    T = num_train_timesteps
    if num_steps > T:
        raise ValueError(
            f"Argument `num_steps` must not exceed the schedule's "
            f"num_train_timesteps={T}. Received: num_steps={num_steps}"
        )


def check_timesteps(num_train_timesteps, t, spacing, steps_offset):
    """Raises unless the timesteps `t` lie in [0, T - 1]: a "leading"
    `steps_offset` may push them past the last."""
    T = num_train_timesteps
    if t.min() < 0 or t.max() > T - 1:
        raise ValueError(
            f"Argument `steps_offset` puts timesteps outside [0, {T - 1}]: "
            f"timestep_spacing={spacing!r} gives "
            f"[{t.min()}, {t.max()}]. Received: steps_offset={steps_offset}"
        )


def discrete_timesteps(schedule, num_steps, spacing, steps_offset):
    """DDPM's and DDIM's timesteps: int64, spaced as diffusers does, checked."""
    T = schedule.num_train_timesteps
    check_steps(T, num_steps)
    t = spaced_timesteps(T, num_steps, spacing, steps_offset).astype(np.int64)
    check_timesteps(T, t, spacing, steps_offset)
    return t


def train_sigmas(schedule):
    """The T sigmas sqrt((1 - abar) / abar), as diffusers' DPM and Euler use them.

    With zero terminal SNR the last alphas_cumprod is 2**-24 instead of 0, so
    that the first sigma is finite.
    """
    abar = np.array(schedule.alphas_cumprod_float64, dtype=np.float64)
    if schedule.rescale_zero_terminal_snr:
        abar[-1] = 2.0**-24
    return np.sqrt((1 - abar) / abar)


def karras_sigmas(sigma_min, sigma_max, num_steps, rho=7.0):
    """Karras et al. (2022), eq. (5): sigmas evenly spaced in sigma**(1 / rho)."""
    ramp = np.linspace(0.0, 1.0, num_steps)
    low, high = sigma_min ** (1.0 / rho), sigma_max ** (1.0 / rho)
    return (high + ramp * (low - high)) ** rho


def sigma_to_t(sigmas, log_sigmas):
    """Fractional timesteps of `sigmas`, interpolating log-sigma (diffusers)."""
    log_sigma = np.log(np.maximum(sigmas, 1e-10))
    dists = log_sigma - log_sigmas[:, None]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=len(log_sigmas) - 2)
    w = (log_sigmas[low] - log_sigma) / (log_sigmas[low] - log_sigmas[low + 1])
    w = np.clip(w, 0.0, 1.0)
    return (1.0 - w) * low + w * (low + 1)


def _euler_sigmas(schedule, spacing, all_sigmas):
    """Euler's and Heun's float32 timesteps and n sigmas."""
    T, n = schedule.num_train_timesteps, spacing.num_steps
    t = spaced_timesteps(
        T, n, spacing.timestep_spacing, spacing.steps_offset, round_linspace=False
    )
    sigmas = np.interp(t, np.arange(T), all_sigmas)
    if spacing.use_karras_sigmas:
        sigmas = karras_sigmas(sigmas[-1], sigmas[0], n)
        t = sigma_to_t(sigmas, np.log(all_sigmas))
    return t.astype(np.float32), sigmas


def _dpm_sigmas(schedule, spacing, all_sigmas):
    """DPM-Solver's int64 timesteps and n sigmas: "linspace" and "leading"
    space n + 1 points and drop the last (timestep 0)."""
    T, n = schedule.num_train_timesteps, spacing.num_steps
    if spacing.timestep_spacing == "trailing":
        t = spaced_timesteps(T, n, "trailing")
    else:
        t = spaced_timesteps(T, n + 1, spacing.timestep_spacing, spacing.steps_offset)[
            :-1
        ]
    if spacing.use_karras_sigmas:
        sigmas = karras_sigmas(all_sigmas[0], all_sigmas[-1], n)
        t = sigma_to_t(sigmas, np.log(all_sigmas))
        if schedule.beta_schedule not in ("cosine", "squaredcos_cap_v2"):
            t = t.round()
    else:
        sigmas = np.interp(t, np.arange(T), all_sigmas)
    return t.astype(np.int64), sigmas


def sampling_levels(schedule, spacing):
    """The `Levels` of a `Spacing` on a VP `schedule` (see the module's
    docstring): the "euler" rule on x0 + sigma n, the network given
    x / sqrt(sigma**2 + 1) and the unit noise multiplied by diffusers'
    `init_noise_sigma` (the largest sigma, or sqrt(sigma_max**2 + 1) for
    "leading" spacing); the "dpm" rule on x_t, the noise as it is."""
    T = schedule.num_train_timesteps
    check_steps(T, spacing.num_steps)
    all_sigmas = train_sigmas(schedule)
    dpm = spacing.rule == "dpm"
    t, sigmas = (_dpm_sigmas if dpm else _euler_sigmas)(schedule, spacing, all_sigmas)
    check_timesteps(T, t, spacing.timestep_spacing, spacing.steps_offset)
    last = all_sigmas[0] if spacing.final_sigma == "sigma_min" else 0.0
    sigmas = np.append(sigmas, last)
    if dpm:
        alpha = 1 / np.sqrt(sigmas**2 + 1)
        state = {"alpha": alpha, "sigma": sigmas * alpha}
        reading = {"alpha": alpha[:-1], "sigma": sigmas[:-1] * alpha[:-1]}
        reading["scale"], init_sigma = np.ones_like(t, dtype=np.float64), 1.0
    else:
        state = {"alpha": np.ones_like(sigmas), "sigma": sigmas}
        scale = np.sqrt(sigmas[:-1] ** 2 + 1)
        reading = {"alpha": 1 / scale, "sigma": sigmas[:-1] / scale, "scale": scale}
        init_sigma = float(sigmas.max())
        if spacing.timestep_spacing == "leading":
            init_sigma = float(np.sqrt(sigmas.max() ** 2 + 1))
    reading["t"] = t
    return Levels(**state, reading=reading, init_sigma=init_sigma)
