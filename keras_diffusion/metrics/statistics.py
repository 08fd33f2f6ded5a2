"""Feature statistics: `.npz` files and the checks of features and Gaussians."""

import os

import numpy as np


def as_float64(value, name):
    """`value` as a float64 array, or a `TypeError` naming the argument."""
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Argument `{name}` must be an array of numbers. Received: {name}={value!r}"
        ) from error


def check_features(features, name):
    """`features` as a float64 array of shape `(num_samples, num_features)`."""
    features = as_float64(features, name)
    if features.ndim != 2:
        raise ValueError(
            f"Argument `{name}` must be a 2D array of shape (num_samples, "
            f"num_features). Received: {name}.shape={features.shape}"
        )
    return features


def check_same_features(a, b, a_name, b_name):
    """A `ValueError` naming both arguments unless the feature arrays `a` and
    `b` (means, or rows of samples) have as many features (last axis)."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"Arguments `{a_name}` and `{b_name}` must have the same number of "
            f"features. Received: {a_name}.shape={a.shape}, {b_name}.shape={b.shape}"
        )


def check_gaussian(mu, sigma, mu_name, sigma_name):
    """`(mu, sigma)` as a float64 mean and a symmetric covariance, checked."""
    mu = as_float64(mu, mu_name)
    sigma = as_float64(sigma, sigma_name)
    if mu.ndim != 1:
        raise ValueError(
            f"Argument `{mu_name}` must be a 1D mean vector. "
            f"Received: {mu_name}.shape={mu.shape}"
        )
    if sigma.shape != (mu.shape[0], mu.shape[0]):
        raise ValueError(
            f"Argument `{sigma_name}` must be a square covariance matrix of shape "
            f"{(mu.shape[0], mu.shape[0])} matching `{mu_name}`. "
            f"Received: {sigma_name}.shape={sigma.shape}"
        )
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))):
        raise ValueError(
            f"Arguments `{mu_name}` and `{sigma_name}` must be finite. "
            f"Received non-finite values."
        )
    # Symmetrise: float64 accumulation leaves asymmetries of order 1e-16.
    return mu, (sigma + sigma.T) / 2.0


def save_statistics(path, **statistics):
    """Writes feature statistics (`mu`, `sigma`, `features`, ...) to an `.npz`.

    The keys `mu` and `sigma` are those of pytorch-fid and TTUR statistics
    files; `FrechetDistance` reads `mu`, `sigma` (and `num_samples` when
    present), `KernelDistance` reads `features`. One file may hold all of them.

    Args:
        path: str or path-like, the file to write.
        **statistics: arrays to store, by name.
    """
    if not statistics:
        raise ValueError(
            "save_statistics needs at least one array to save. Received: "
            f"statistics={statistics!r}"
        )
    np.savez(path, **{k: np.asarray(v) for k, v in statistics.items()})


def load_statistics(path):
    """Reads an `.npz` written by `save_statistics` into a dict of arrays."""
    if not os.path.isfile(path):
        raise ValueError(
            "Argument `path` must be an existing .npz statistics file. "
            f"Received: path={path!r}"
        )
    with np.load(path) as data:
        return {key: data[key] for key in data.files}
