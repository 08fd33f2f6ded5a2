"""Post-hoc EMA: snapshots of the power-function profiles, and any other
profile reconstructed from them after training (Karras et al., 2024,
section 3.2 and appendix C.2).

A snapshot is the profiles' averages after update `t`, one `.npz` file a
snapshot in a folder (a run's `posthoc_ema/`):

    snapshot-000001200.npz: t, gammas, sigma_rels, p0_0, p0_1, ..., p1_0, ...

(`pK_J`: profile K's average of tracked variable J, float32). A snapshot
(profile `gamma`, time `t`) averages the run's weights `theta(1..t)` with
the weights `power_ema.weights(gamma, t)`. A profile `gamma_r` at time
`t_r` that was not tracked is the combination of snapshots whose weights
come nearest its own, in the least-squares sense over the run's updates:

    x = argmin || sum_k x_k w(gamma_k, t_k) - w(gamma_r, t_r) ||^2,
    theta_r = sum_k (x_k / sum_j x_j) theta_hat(gamma_k, t_k).

The coefficients are divided by their sum, as EDM2's
`solve_posthoc_coefficients` (NVlabs/edm2, `training/phema.py`) does: every
profile's weights sum to 1, so the combination's must too, or a weight that
never changed would come back scaled (by 0.98 at `sigma_rel` 0.25 on a run's
16 snapshots). The weights are those of the updates the run made (EDM2
takes the inner products of the continuous-time profiles instead, which
differ on short runs; docs/quality.md, "Post-hoc EMA"), so a tracked
profile's own snapshot is reconstructed exactly, up to float rounding.
"""

import os
import re

import numpy as np

from keras_diffusion.averages.power_ema import gamma_of, weights
from keras_diffusion.utils import files

_NAME = re.compile(r"^snapshot-(\d{9})\.npz$")


def snapshot_name(t):
    return f"snapshot-{int(t):09d}.npz"


def write_snapshot(folder, tracker):
    """Writes `tracker`'s (a `PowerFunctionEMA`) averages as the snapshot of
    its update count, atomically; returns its path."""
    t = tracker.updates()
    arrays = {
        "t": np.int64(t),
        "gammas": np.asarray(tracker.gammas, np.float64),
        "sigma_rels": np.asarray(tracker.sigma_rels, np.float64),
    }
    for k, profile in enumerate(tracker.values()):
        for j, value in enumerate(profile):
            arrays[f"p{k}_{j}"] = value
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, snapshot_name(t))
    with files.atomic_write(path) as tmp:
        np.savez(tmp, **arrays)
    return path


def snapshot_steps(folder):
    """The update counts of the snapshots in `folder`, ascending (none for a
    missing folder; a killed writer's temporaries are not snapshots)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for m in map(_NAME.match, names) if m)


def remove_after(folder, t):
    """Removes the snapshots of update counts above `t` (those of a run's
    abandoned future, after a resume from an earlier backup) and a killed
    writer's temporaries; returns the counts removed."""
    files.remove_temporaries(folder)
    later = [s for s in snapshot_steps(folder) if s > t]
    for s in later:
        os.remove(os.path.join(folder, snapshot_name(s)))
    return later


def without_profiles(model):
    """A copy of the `DiffusionModel` `model` that tracks no profiles (it
    samples and saves like any other), its weights and EMA those of
    `model`; `assign` then sets its averaged weights."""
    config = model.get_config()
    config.pop("posthoc_ema", None)
    copy = type(model).from_config(config)
    copy.denoiser.set_weights(model.denoiser.get_weights())
    # A text encoder's, and an autoencoder's that its config does not
    # restore (keras-hub's SD3 VAE: built from the config, random).
    for part in ("conditioning", "autoencoder"):
        if getattr(getattr(model, part), "weights", None):
            getattr(copy, part).set_weights(getattr(model, part).get_weights())
    if model.ema is not None and copy.ema is not None:
        copy.ema.copy_from(model.ema)
    return copy


def assign(model, values):
    """Sets the weights `model` samples with to `values` (`reconstruct`'s):
    its EMA, or without one its trainable weights."""
    if model.ema is not None:
        targets = model.ema.shadows
    else:
        # The denoiser's, then a text encoder's: what the profiles track.
        targets = model.averaged_variables
    if len(targets) != len(values):
        raise ValueError(
            f"The snapshots hold {len(values)} tracked weights, the model "
            f"{len(targets)}: they come from another model."
        )
    for target, value in zip(targets, values, strict=True):
        if tuple(target.shape) != value.shape:
            raise ValueError(
                f"The snapshots hold a weight of shape {value.shape} where "
                f"the model has {tuple(target.shape)}: they come from "
                "another model."
            )
        target.assign(value.astype(target.dtype))


def _read_header(folder, t):
    with np.load(os.path.join(folder, snapshot_name(t))) as f:
        return [float(g) for g in f["gammas"]]


def solve(timeline, gamma, at):
    """`(x, error)`: the coefficients of the profiles `timeline` (a list of
    `(t, gamma_k)`, each `t <= at`) whose combination comes nearest the
    profile of exponent `gamma` after update `at`, by least squares over the
    per-update weights, divided by their sum; `error` is the relative L2
    distance between the combination's weights and the wanted ones."""
    matrix = np.zeros((at, len(timeline)))
    for column, (t, gamma_k) in enumerate(timeline):
        matrix[:t, column] = weights(gamma_k, t)
    target = weights(gamma, at)
    x, *_ = np.linalg.lstsq(matrix, target, rcond=None)
    x = x / np.sum(x)
    error = np.linalg.norm(matrix @ x - target) / np.linalg.norm(target)
    return x, float(error)


def coefficients(folder, sigma_rel, at=None):
    """`(terms, error)`: how to combine the snapshots in `folder` into the
    profile of width `sigma_rel` after update `at` (the newest snapshot's by
    default). `terms` is a list of `(t, k, x)`: snapshot `t`'s profile `k`
    with coefficient `x` (they sum to 1); `error` the relative L2 distance
    between the combined weights and the wanted ones (0: exact).

    Raises:
        ValueError: no snapshot in `folder`, or `at` before the first or
            after the newest.
    """
    steps = snapshot_steps(folder)
    if not steps:
        raise ValueError(
            f"No post-hoc EMA snapshots in {folder!r}: train with "
            "--posthoc-ema (posthoc_ema=... on DiffusionModel) to write them."
        )
    at = steps[-1] if at is None else int(at)
    if not steps[0] <= at <= steps[-1]:
        raise ValueError(
            f"Argument `at` must be an update count from the first snapshot's, "
            f"{steps[0]}, to the newest's, {steps[-1]}. Received: at={at!r}"
        )
    gamma = gamma_of(sigma_rel)
    keys, timeline = [], []
    for t in (s for s in steps if s <= at):
        for k, gamma_k in enumerate(_read_header(folder, t)):
            keys.append((t, k))
            timeline.append((t, gamma_k))
    x, error = solve(timeline, gamma, at)
    return [(t, k, float(c)) for (t, k), c in zip(keys, x, strict=True)], error


def reconstruct(folder, sigma_rel, at=None):
    """`(values, error)`: the float32 averages of the tracked variables in the
    profile of width `sigma_rel` after update `at` (see `coefficients`),
    read one snapshot at a time."""
    terms, error = coefficients(folder, sigma_rel, at)
    values = None
    for t in sorted({t for t, _, _ in terms}):
        with np.load(os.path.join(folder, snapshot_name(t))) as f:
            for t_k, k, x in terms:
                if t_k != t:
                    continue
                count = sum(1 for name in f.files if name.startswith(f"p{k}_"))
                arrays = [f[f"p{k}_{j}"].astype(np.float64) for j in range(count)]
                if values is None:
                    values = [np.zeros_like(a) for a in arrays]
                for total, a in zip(values, arrays, strict=True):
                    total += x * a
    return [v.astype(np.float32) for v in values], error
