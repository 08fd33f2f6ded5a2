"""Where diffusers' `set_timesteps` lists other timesteps than ours, and the warning.

diffusers spaces "trailing" timesteps as `round(arange(T, 0, -T / n)) - 1`, in
every scheduler (DDPM, DDIM, DPM-Solver, Euler, Heun). `np.arange` with a
float step carries rounding error, and where it lands on the wrong side of a
bound the list changes:

- for 62 of the step counts of T = 1000 (61, 103, 121, ...) the last value
  is a hair above 0 and is kept: diffusers lists n + 1 timesteps, the last
  -1, and takes one more step there. Its DDPM and DDIM then read
  `alphas_cumprod[-1]`, the noisiest level, as the level of a nearly clean
  sample (the sample comes out ~150 times too large); its Euler, Heun and
  DPM-Solver take one more step at the smallest noise level.
- for 49 more (48, 96, 112, ...) a value at a tie of the rounding (937.5)
  falls a hair below it, and one timestep comes out one lower (936 where
  ours is 937).

`keras_diffusion.schedules.vp_sampling.spaced_timesteps` computes
`round(T - k * T / n) - 1` without accumulating, and keeps its list: a valid
timestep for every step (and, rounded half to even as NumPy does, the list of
exact arithmetic for 989 of the 1,000 counts, against 950 for diffusers').
Its samples then differ from diffusers', so it says so, once for each
(T, n): docs/interop.md, "Known differences".
"""

import warnings

import numpy as np

# The (T, n) already warned of: one warning each, however often a sampler
# plans its steps (each `sample`, `timesteps` and `validate` does).
_WARNED = set()


def diffusers_trailing(num_train_timesteps, num_steps):
    """diffusers' "trailing" `set_timesteps(num_steps)`, its float error included.

    Returns:
        int64 NumPy array, largest first; n + 1 values (the last -1) for
        some n.
    """
    T, n = num_train_timesteps, num_steps
    return np.round(np.arange(T, 0, -T / n)).astype(np.int64) - 1


def trailing_difference(num_train_timesteps, num_steps, timesteps):
    """One line naming how diffusers' "trailing" list differs from
    `timesteps` (ours, largest first), or `None` where they agree."""
    T, n = num_train_timesteps, num_steps
    theirs = diffusers_trailing(T, n)
    ours = np.asarray(timesteps, np.int64)
    if len(theirs) == len(ours) and np.array_equal(theirs, ours):
        return None
    head = (
        f"timestep_spacing='trailing' with num_steps={n} of "
        f"num_train_timesteps={T}: diffusers' schedulers list"
    )
    cause = "float error in their np.arange(T, 0, -T / n)"
    see = "(docs/interop.md, 'Known differences')"
    if len(theirs) == len(ours) + 1 and theirs[-1] == -1:
        return (
            f"{head} {len(theirs)} timesteps, the last -1 ({cause}), and step "
            "once more there (DDPM and DDIM read alphas_cumprod[-1], the "
            "noisiest level; Euler, Heun and DPM-Solver the smallest sigma "
            f"again). This sampler steps over the {n} valid timesteps, "
            f"diffusers' first {n}, so its samples differ from diffusers' {see}."
        )
    if len(theirs) != len(ours):
        # No such count is known; named as it is, should one appear.
        what = f"{len(theirs)} timesteps where this sampler has {len(ours)} ({cause})"
    else:
        where = np.flatnonzero(theirs != ours)
        what = ", ".join(
            f"{theirs[i]} where this sampler has {ours[i]}" for i in where[:4]
        )
        if len(where) > 4:
            what += f" and {len(where) - 4} more"
        what += f" (a rounding tie moved by {cause})"
    return (
        f"{head} {what}. This sampler keeps its list, so its samples differ "
        f"from diffusers' {see}."
    )


def warn_trailing_difference(num_train_timesteps, num_steps, timesteps):
    """Warns once for each (T, n) where diffusers' "trailing" timesteps are
    not `timesteps`."""
    key = (int(num_train_timesteps), int(num_steps))
    if key in _WARNED:
        return
    message = trailing_difference(num_train_timesteps, num_steps, timesteps)
    if message is None:
        return
    _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=4)
