"""Kernel distance (KID): unbiased polynomial-kernel MMD^2 and its metric."""

import keras
import numpy as np
from keras import ops

from keras_diffusion.metrics.feature_distance import (
    INCEPTION_V3,
    PARTS,
    FeatureDistance,
)
from keras_diffusion.metrics.statistics import check_features, check_same_features
from keras_diffusion.utils.checks import check_int


def _polynomial_mmd2(x, y):
    """Unbiased MMD^2 with kernel k(a, b) = (a.b / d + 1)^3 (KID, eq. 3)."""
    m, d = x.shape
    k_xx = (x @ x.T / d + 1.0) ** 3
    k_yy = (y @ y.T / d + 1.0) ** 3
    k_xy = (x @ y.T / d + 1.0) ** 3
    # Unbiased: the diagonal terms k(x_i, x_i) are left out of the within-set sums.
    within = (k_xx.sum() - np.trace(k_xx) + k_yy.sum() - np.trace(k_yy)) / (m * (m - 1))
    return within - 2.0 * k_xy.sum() / (m * m)


def kernel_distance(
    real_features, generated_features, num_subsets=100, subset_size=1000, seed=None
):
    """Kernel Inception distance between two sets of features.

    The unbiased estimate of the squared MMD with the polynomial kernel
    `k(x, y) = (x.y / d + 1)^3`, averaged over `num_subsets` random subsets of
    `subset_size` samples drawn without replacement from each set.

    Args:
        real_features: array of shape `(n, d)`.
        generated_features: array of shape `(m, d)`.
        num_subsets: int, number of random subsets. Defaults to `100`.
        subset_size: int, samples a subset, at most `min(n, m)`.
            Defaults to `1000`.
        seed: int or None, seed of the subset draws. Defaults to `None`.

    Returns:
        `(mean, std)`: mean and standard deviation over the subsets, floats.
        The mean can be slightly negative: the estimator is unbiased.

    Reference:
        - [Binkowski et al., 2018](https://arxiv.org/abs/1801.01401)
    """
    x = check_features(real_features, "real_features")
    y = check_features(generated_features, "generated_features")
    check_same_features(x, y, "real_features", "generated_features")
    num_subsets = check_int("num_subsets", num_subsets, 1)
    subset_size = check_int("subset_size", subset_size, 2)
    if subset_size > min(len(x), len(y)):
        raise ValueError(
            "Argument `subset_size` must be at most the number of samples in each "
            f"set ({len(x)} real, {len(y)} generated). "
            f"Received: subset_size={subset_size}"
        )
    rng = np.random.default_rng(seed)
    scores = np.empty(num_subsets)
    for i in range(num_subsets):
        x_subset = x[rng.choice(len(x), subset_size, replace=False)]
        y_subset = y[rng.choice(len(y), subset_size, replace=False)]
        scores[i] = _polynomial_mmd2(x_subset, y_subset)
    return float(scores.mean()), float(scores.std())


@keras.saving.register_keras_serializable(package="keras_diffusion")
class KernelDistance(FeatureDistance):
    """Kernel distance (KID): unbiased polynomial-kernel MMD^2 over subsets.

    KID needs the features themselves, not only moments. Each set keeps a
    uniform random sample of at most `max_samples` of its features (reservoir
    sampling on the device, float32), so memory is bounded by
    `2 * max_samples * d` floats; while a set has at most `max_samples` images,
    every feature is kept in order. `result()` draws `num_subsets` subsets of
    `subset_size` from each reservoir and returns the mean and standard
    deviation of the unbiased MMD^2 with kernel `(x.y / d + 1)^3`
    (see `kernel_distance`).

    Args:
        feature_extractor: as in `FrechetDistance`. Defaults to `'inception_v3'`.
        weights: as in `FrechetDistance`. Defaults to `'imagenet'`.
        num_features: as in `FrechetDistance`. Defaults to `None`.
        num_subsets: int, number of random subsets. Defaults to `100`.
        subset_size: int, samples a subset. Defaults to `1000`.
        max_samples: int, reservoir size a set. Defaults to `10000`.
        real_statistics: path of an `.npz` with the real `features` (written by
            `save_real_statistics`). Defaults to `None`.
        seed: int or None, seed of the reservoir and of the subset draws; with
            an int, `result()` is deterministic. Defaults to `None`.
        name: str, metric name; `result()` returns `{name: mean,
            name + '_std': std}`. Defaults to `'kid'`.
        dtype: dtype of the metric. Defaults to `None`.

    Call arguments (`update_state`):
        real_images: batch of real images in [-1, 1], or None.
        generated_images: batch of generated images in [-1, 1], or None.

    Reference:
        - [Binkowski et al., 2018](https://arxiv.org/abs/1801.01401)
    """

    def __init__(
        self,
        feature_extractor=INCEPTION_V3,
        weights="imagenet",
        num_features=None,
        num_subsets=100,
        subset_size=1000,
        max_samples=10000,
        real_statistics=None,
        seed=None,
        name="kid",
        dtype=None,
    ):
        num_subsets = check_int("num_subsets", num_subsets, 1)
        subset_size = check_int("subset_size", subset_size, 2)
        max_samples = check_int("max_samples", max_samples, 2)
        if subset_size > max_samples:
            raise ValueError(
                f"Argument `subset_size` must be at most max_samples={max_samples}. "
                f"Received: subset_size={subset_size}"
            )
        if seed is not None:
            seed = check_int("seed", seed, 0)
        super().__init__(
            feature_extractor, weights, num_features, real_statistics, name, dtype
        )
        self.num_subsets = num_subsets
        self.subset_size = subset_size
        self.max_samples = max_samples
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)
        self._loaded = None
        stats = self._load_real_statistics(("features",))
        if stats is not None:
            features = check_features(stats["features"], "features")
            self._check_real_width("features", features.shape[1], "columns")
            self._loaded = features
        self._reservoirs = {}
        for part in PARTS:
            self._reservoirs[part] = (
                self.add_variable((), "zeros", "float64", name=f"{part}_count"),
                # One spare last row takes the draws reservoir sampling discards.
                self.add_variable(
                    (max_samples + 1, self.num_features),
                    "zeros",
                    "float32",
                    name=f"{part}_reservoir",
                ),
            )

    def _accumulate(self, part, features):
        count, reservoir = self._reservoirs[part]
        batch = ops.shape(features)[0]
        cap = float(self.max_samples)
        # Algorithm R, vectorised: the sample with global index i replaces
        # a uniform slot j in [0, i] when j < cap.
        index = count + ops.cast(ops.arange(batch), "float64")
        uniform = keras.random.uniform(
            ops.shape(index), dtype="float64", seed=self._seed_generator
        )
        slot = ops.minimum(ops.floor(uniform * (index + 1.0)), index)
        slot = ops.where(index < cap, index, slot)
        slot = ops.cast(ops.minimum(slot, cap), "int32")
        # Within a batch the later of two samples drawing one slot wins.
        positions = ops.arange(batch)
        overwritten = ops.any(
            ops.logical_and(
                ops.equal(slot[:, None], slot[None, :]),
                positions[None, :] > positions[:, None],
            ),
            axis=1,
        )
        slot = ops.where(overwritten, self.max_samples, slot)
        reservoir.assign(
            ops.scatter_update(reservoir, slot[:, None], ops.cast(features, "float32"))
        )
        count.assign_add(ops.cast(batch, "float64"))

    def _features(self, part):
        if part == "real" and self._loaded is not None:
            return self._loaded
        count, reservoir = self._reservoirs[part]
        kept = int(min(float(count.numpy()), self.max_samples))
        return np.asarray(reservoir.numpy()[:kept], dtype=np.float64)

    def get_real_statistics(self):
        """Returns `{'features': (n, d) array}` of the real set's reservoir."""
        return {"features": self._features("real")}

    def result(self):
        # kernel_distance checks that each set has `subset_size` samples.
        mean, std = kernel_distance(
            self._features("real"),
            self._features("generated"),
            self.num_subsets,
            self.subset_size,
            self.seed,
        )
        return {self.name: mean, f"{self.name}_std": std}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_subsets": self.num_subsets,
                "subset_size": self.subset_size,
                "max_samples": self.max_samples,
                "seed": self.seed,
            }
        )
        return config
