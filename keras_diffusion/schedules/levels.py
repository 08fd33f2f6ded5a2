"""A sampler's question and a process's answer: the noise levels it steps over.

Euler, Heun and DPM-Solver ask a process (`Process.sampling_levels`) for the
levels of their `Spacing` (their steps and the options of the diffusers
scheduler they reproduce) and plan their update from the `Levels` it gives,
whatever the process (docs/architecture.md, "One home for each process").
"""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Spacing:
    """What a sampler that steps over noise levels asks of a process: its
    number of steps and the options of diffusers' scheduler it reproduces.

    Attributes:
        num_steps: int, the levels the network is evaluated at.
        rule: str, whose list of levels: `"euler"` (diffusers' Euler and Heun
            schedulers: `num_steps` levels, then 0) or `"dpm"` (DPM-Solver's:
            on a VP schedule `num_steps + 1` spaced points with the last
            dropped, Karras sigmas over the whole training range; on flow
            matching its `dpm_sigmas` and integer time inputs).
        timestep_spacing, steps_offset, use_karras_sigmas: diffusers' options
            of the discrete timesteps (a VP schedule's; another process has
            its own levels, and the sampler refuses them there).
        final_sigma: str, the level after the last step: `"zero"` (a clean
            sample) or `"sigma_min"` (the process's smallest).
    """

    num_steps: int
    rule: str = "euler"
    timestep_spacing: str = "linspace"
    steps_offset: int = 0
    use_karras_sigmas: bool = False
    final_sigma: str = "zero"


@dataclasses.dataclass
class Levels:
    """A process's answer to a `Spacing`: the levels a sampler steps over.

    Attributes:
        alpha, sigma: float64 arrays of `num_steps + 1` entries: the sampler's
            state is x = alpha x0 + sigma n at each level, the last the one
            sampling ends at. The samplers step over sigma / alpha, as
            k-diffusion's on x / alpha = x0 + (sigma / alpha) n, and write
            their update on x.
        reading: dict of `num_steps`-entry arrays, the keys of this process's
            `output_tables` that read the network output at each level (its
            time input among them).
        init_sigma: float, what the unit starting noise is multiplied by.
        reads_velocity: bool, whether the state is flow's (1 - sigma) x0 +
            sigma n and the network returns its slope, the velocity: Heun then
            steps in sigma on x itself and reads its corrector's slope as
            eps - x0, as diffusers' flow-match Heun does.
    """

    alpha: np.ndarray
    sigma: np.ndarray
    reading: dict
    init_sigma: float
    reads_velocity: bool = False
