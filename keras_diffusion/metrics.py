"""Sample-quality metrics: Frechet distance (FID) and kernel distance (KID).

Both metrics embed images with a feature extractor (by default Keras'
InceptionV3 with ImageNet weights) and compare the real and generated feature
distributions. `update_state` runs in `keras.ops` (on the device, usable in a
compiled function); `result` is host-side NumPy maths on the small final
statistics, so neither metric is meant for `model.compile(metrics=...)`.
"""

import os

import keras
import numpy as np
from keras import ops

INCEPTION_V3 = "inception_v3"
INCEPTION_SIZE = (299, 299)
INCEPTION_FEATURES = 2048


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"Argument `{name}` must be an integer >= {minimum}. "
            f"Received: {name}={value!r}"
        )
    if value < minimum:
        raise ValueError(
            f"Argument `{name}` must be an integer >= {minimum}. "
            f"Received: {name}={value!r}"
        )


def _as_float64(value, name):
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Argument `{name}` must be an array of numbers. Received: {name}={value!r}"
        ) from error


def _check_features(features, name):
    features = _as_float64(features, name)
    if features.ndim != 2:
        raise ValueError(
            f"Argument `{name}` must be a 2D array of shape (num_samples, "
            f"num_features). Received: {name}.shape={features.shape}"
        )
    return features


def _check_gaussian(mu, sigma, mu_name, sigma_name):
    mu = _as_float64(mu, mu_name)
    sigma = _as_float64(sigma, sigma_name)
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


def frechet_distance(mu1, sigma1, mu2, sigma2):
    """Frechet distance between two Gaussians N(mu1, sigma1) and N(mu2, sigma2).

    `|mu1 - mu2|^2 + Tr(sigma1 + sigma2 - 2 (sigma1 sigma2)^(1/2))`. The trace of
    the matrix square root is computed as the sum of the square roots of the
    eigenvalues of the symmetric matrix `sigma1^(1/2) sigma2 sigma1^(1/2)`,
    which has the same spectrum as `sigma1 sigma2`. Unlike `scipy.linalg.sqrtm`
    this gives no imaginary parts and needs no `eps * I` for singular or
    near-singular covariances (fewer samples than features, rank-deficient
    features): eigenvalues that rounding makes slightly negative are clipped
    to zero, and so is the final distance.

    Args:
        mu1: array of shape `(d,)`, mean of the first set of features.
        sigma1: array of shape `(d, d)`, covariance of the first set.
        mu2: array of shape `(d,)`, mean of the second set.
        sigma2: array of shape `(d, d)`, covariance of the second set.

    Returns:
        The distance, a non-negative Python float.

    Example:

    >>> frechet_distance([0.0], [[1.0]], [1.0], [[4.0]])  # 1 + (1 - 2)^2
    2.0
    """
    mu1, sigma1 = _check_gaussian(mu1, sigma1, "mu1", "sigma1")
    mu2, sigma2 = _check_gaussian(mu2, sigma2, "mu2", "sigma2")
    if mu1.shape != mu2.shape:
        raise ValueError(
            "Arguments `mu1` and `mu2` must have the same number of features. "
            f"Received: mu1.shape={mu1.shape}, mu2.shape={mu2.shape}"
        )
    eigenvalues, eigenvectors = np.linalg.eigh(sigma1)
    sqrt_sigma1 = (eigenvectors * np.sqrt(np.clip(eigenvalues, 0.0, None))) @ (
        eigenvectors.T
    )
    product = sqrt_sigma1 @ sigma2 @ sqrt_sigma1
    product = (product + product.T) / 2.0
    trace_sqrt = np.sum(np.sqrt(np.clip(np.linalg.eigvalsh(product), 0.0, None)))
    diff = mu1 - mu2
    distance = diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * trace_sqrt
    return float(max(distance, 0.0))


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
    x = _check_features(real_features, "real_features")
    y = _check_features(generated_features, "generated_features")
    if x.shape[1] != y.shape[1]:
        raise ValueError(
            "Arguments `real_features` and `generated_features` must have the "
            f"same number of features. Received: real_features.shape={x.shape}, "
            f"generated_features.shape={y.shape}"
        )
    _check_int(num_subsets, "num_subsets", 1)
    _check_int(subset_size, "subset_size", 2)
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


def _build_inception(weights):
    if weights not in ("imagenet", None) and not os.path.isfile(weights):
        raise ValueError(
            "Argument `weights` must be 'imagenet', None or the path to a local "
            "InceptionV3 weights file (include_top=False). "
            f"Received: weights={weights!r}"
        )
    try:
        return keras.applications.InceptionV3(
            include_top=False,
            weights=weights,
            input_shape=INCEPTION_SIZE + (3,),
            pooling="avg",
        )
    except Exception as error:
        if weights != "imagenet":
            raise
        raise RuntimeError(
            "Could not get the ImageNet weights of InceptionV3 for "
            "feature_extractor='inception_v3' (no network access?). Download "
            "'inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5' where you "
            "have network access and pass `weights='/path/to/that.h5'`, or pass "
            "your own `feature_extractor`. Original error: "
            f"{type(error).__name__}: {error}"
        ) from error


class _FeatureDistance(keras.metrics.Metric):
    """Shared feature extraction and argument handling of FID and KID."""

    def __init__(
        self,
        feature_extractor=INCEPTION_V3,
        weights="imagenet",
        num_features=None,
        real_statistics=None,
        name=None,
        dtype=None,
    ):
        super().__init__(name=name, dtype=dtype)
        if isinstance(feature_extractor, str):
            if feature_extractor != INCEPTION_V3:
                raise ValueError(
                    f"Argument `feature_extractor` must be '{INCEPTION_V3}', None, "
                    "a Keras model or a callable. "
                    f"Received: feature_extractor={feature_extractor!r}"
                )
            self._extractor = _build_inception(weights)
            inferred = INCEPTION_FEATURES
        elif feature_extractor is None or callable(feature_extractor):
            self._extractor = feature_extractor
            inferred = _output_features(feature_extractor)
        else:
            raise TypeError(
                f"Argument `feature_extractor` must be '{INCEPTION_V3}', None, a "
                "Keras model or a callable. "
                f"Received: feature_extractor={feature_extractor!r}"
            )
        if num_features is None:
            if inferred is None:
                raise ValueError(
                    "Argument `num_features` is required when it cannot be read "
                    "from the extractor's output shape. Received: "
                    f"num_features=None, feature_extractor={feature_extractor!r}"
                )
            num_features = inferred
        _check_int(num_features, "num_features", 1)
        if inferred is not None and num_features != inferred:
            raise ValueError(
                f"Argument `num_features` must match the extractor's {inferred} "
                f"output features. Received: num_features={num_features}"
            )
        if real_statistics is not None and not isinstance(
            real_statistics, (str, os.PathLike)
        ):
            raise TypeError(
                "Argument `real_statistics` must be the path of an .npz file "
                f"or None. Received: real_statistics={real_statistics!r}"
            )
        self.feature_extractor = feature_extractor
        self.weights = weights
        self.num_features = int(num_features)
        self.real_statistics = (
            None if real_statistics is None else os.fspath(real_statistics)
        )

    def extract_features(self, images, name="images"):
        """Maps a batch of images in [-1, 1] to features of shape `(N, d)`."""
        images = ops.convert_to_tensor(images)
        if len(images.shape) < 2:
            raise ValueError(
                f"Argument `{name}` must be a batch of images. "
                f"Received: {name}.shape={tuple(images.shape)}"
            )
        if self._extractor is None:
            features = ops.reshape(images, (ops.shape(images)[0], -1))
        elif isinstance(self.feature_extractor, str):
            features = self._inception_features(images, name)
        elif isinstance(self._extractor, keras.Layer):
            features = self._extractor(images, training=False)
        else:
            features = self._extractor(images)
        shape = tuple(features.shape)
        if len(shape) != 2 or shape[1] not in (None, self.num_features):
            raise ValueError(
                f"The features of `{name}` must have shape (batch, "
                f"{self.num_features}) (num_features={self.num_features}). "
                f"Received: {name}.shape={tuple(images.shape)} giving features "
                f"of shape {shape}"
            )
        return features

    def _inception_features(self, images, name):
        if len(images.shape) != 4 or images.shape[-1] not in (1, 3):
            raise ValueError(
                f"Argument `{name}` must be NHWC images with 1 or 3 channels for "
                f"feature_extractor='{INCEPTION_V3}'. "
                f"Received: {name}.shape={tuple(images.shape)}"
            )
        images = ops.cast(images, "float32")
        if images.shape[-1] == 1:
            images = ops.repeat(images, 3, axis=-1)
        # Inputs are already in [-1, 1], the range inception_v3.preprocess_input
        # maps [0, 255] to, so resizing is the whole preprocessing.
        images = ops.image.resize(images, INCEPTION_SIZE, interpolation="bilinear")
        return self._extractor(images, training=False)

    def _check_update(self, real_images, generated_images):
        if real_images is None and generated_images is None:
            raise ValueError(
                "update_state needs `real_images` or `generated_images`. "
                "Received: real_images=None, generated_images=None"
            )
        if real_images is not None and self.real_statistics is not None:
            raise ValueError(
                "Real statistics were loaded from real_statistics="
                f"{self.real_statistics!r}; pass only `generated_images`."
            )

    def get_config(self):
        config = super().get_config()
        extractor = self.feature_extractor
        if extractor is not None and not isinstance(extractor, str):
            extractor = keras.saving.serialize_keras_object(extractor)
        config.update(
            {
                "feature_extractor": extractor,
                "weights": self.weights,
                "num_features": self.num_features,
                "real_statistics": self.real_statistics,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("feature_extractor"), dict):
            config["feature_extractor"] = keras.saving.deserialize_keras_object(
                config["feature_extractor"]
            )
        return cls(**config)


def _output_features(extractor):
    try:
        shape = extractor.output_shape
    except Exception:  # Unbuilt layers and plain callables have none.
        return None
    if isinstance(shape, (tuple, list)) and len(shape) == 2:
        if isinstance(shape[1], int):
            return shape[1]
    return None


@keras.saving.register_keras_serializable(package="keras_diffusion")
class FrechetDistance(_FeatureDistance):
    """Frechet distance between feature Gaussians (FID with InceptionV3).

    Streaming: each set (real, generated) keeps a sample count, the sum of its
    features and the sum of their outer products, in float64, so memory is
    `O(d^2)` whatever the number of images. `result()` forms the means and
    unbiased covariances and calls `frechet_distance` on the host.

    Args:
        feature_extractor: `'inception_v3'` (Keras' InceptionV3, pooled 2048
            features; images are resized to 299x299 bilinearly, grayscale is
            repeated to 3 channels), a Keras model or callable mapping images in
            [-1, 1] to `(batch, d)` features, or None to use the flattened
            inputs themselves as features. Defaults to `'inception_v3'`.
        weights: weights of InceptionV3: `'imagenet'` (downloaded by Keras),
            the path to a local weights file, or None. Defaults to `'imagenet'`.
        num_features: int, size `d` of the features; read from the extractor
            when it has a known output shape. Defaults to `None`.
        real_statistics: path of an `.npz` with `mu` and `sigma` of the real
            features (written by `save_real_statistics`, or pytorch-fid's). The
            real set then needs no images and survives `reset_state`.
            Defaults to `None`.
        name: str, metric name. Defaults to `'fid'`.
        dtype: dtype of the metric. Defaults to `None`.

    Call arguments (`update_state`):
        real_images: batch of real images in [-1, 1], or None.
        generated_images: batch of generated images in [-1, 1], or None.

    Example:

    ```python
    fid = FrechetDistance(feature_extractor=None, num_features=2)
    fid.update_state(real_images=np.random.normal(size=(500, 2)))
    fid.update_state(generated_images=np.random.normal(1.0, size=(500, 2)))
    fid.result()  # about 2.0
    ```

    Reference:
        - [Heusel et al., 2017](https://arxiv.org/abs/1706.08500)
    """

    def __init__(
        self,
        feature_extractor=INCEPTION_V3,
        weights="imagenet",
        num_features=None,
        real_statistics=None,
        name="fid",
        dtype=None,
    ):
        super().__init__(
            feature_extractor=feature_extractor,
            weights=weights,
            num_features=num_features,
            real_statistics=real_statistics,
            name=name,
            dtype=dtype,
        )
        d = self.num_features
        self._loaded = None
        if self.real_statistics is not None:
            stats = load_statistics(self.real_statistics)
            if "mu" not in stats or "sigma" not in stats:
                raise ValueError(
                    "Argument `real_statistics` must name an .npz with 'mu' and "
                    f"'sigma'. Received: real_statistics={self.real_statistics!r} "
                    f"with keys {sorted(stats)}"
                )
            mu, sigma = _check_gaussian(stats["mu"], stats["sigma"], "mu", "sigma")
            if mu.shape[0] != d:
                raise ValueError(
                    f"The statistics in real_statistics={self.real_statistics!r} "
                    f"have {mu.shape[0]} features, not num_features={d}."
                )
            count = float(stats.get("num_samples", 0))
            self._loaded = {"mu": mu, "sigma": sigma, "num_samples": count}
        self._sums = {}
        for part in ("real", "generated"):
            self._sums[part] = (
                self.add_variable((), "zeros", "float64", name=f"{part}_count"),
                self.add_variable((d,), "zeros", "float64", name=f"{part}_sum"),
                self.add_variable((d, d), "zeros", "float64", name=f"{part}_outer"),
            )

    def update_state(self, real_images=None, generated_images=None):
        self._check_update(real_images, generated_images)
        for part, images in (("real", real_images), ("generated", generated_images)):
            if images is None:
                continue
            features = self.extract_features(images, f"{part}_images")
            features = ops.cast(features, "float64")
            count, total, outer = self._sums[part]
            count.assign_add(ops.cast(ops.shape(features)[0], "float64"))
            total.assign_add(ops.sum(features, axis=0))
            outer.assign_add(ops.matmul(ops.transpose(features), features))

    def _statistics(self, part):
        if part == "real" and self._loaded is not None:
            return self._loaded
        count, total, outer = (np.asarray(v.numpy()) for v in self._sums[part])
        count = float(count)
        if count < 2:
            raise ValueError(
                f"FrechetDistance needs at least 2 {part} samples. "
                f"Received: {int(count)} {part} samples."
            )
        mu = total / count
        sigma = (outer - count * np.outer(mu, mu)) / (count - 1.0)
        return {"mu": mu, "sigma": sigma, "num_samples": count}

    def get_real_statistics(self):
        """Returns the real set's `{'mu', 'sigma', 'num_samples'}` as arrays."""
        return dict(self._statistics("real"))

    def save_real_statistics(self, path):
        """Saves the real set's `mu`, `sigma` and `num_samples` to an `.npz`."""
        save_statistics(path, **self.get_real_statistics())

    def result(self):
        real = self._statistics("real")
        generated = self._statistics("generated")
        return frechet_distance(
            real["mu"], real["sigma"], generated["mu"], generated["sigma"]
        )


@keras.saving.register_keras_serializable(package="keras_diffusion")
class KernelDistance(_FeatureDistance):
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
        _check_int(num_subsets, "num_subsets", 1)
        _check_int(subset_size, "subset_size", 2)
        _check_int(max_samples, "max_samples", 2)
        if subset_size > max_samples:
            raise ValueError(
                f"Argument `subset_size` must be at most max_samples={max_samples}. "
                f"Received: subset_size={subset_size}"
            )
        if seed is not None:
            _check_int(seed, "seed", 0)
        super().__init__(
            feature_extractor=feature_extractor,
            weights=weights,
            num_features=num_features,
            real_statistics=real_statistics,
            name=name,
            dtype=dtype,
        )
        self.num_subsets = num_subsets
        self.subset_size = subset_size
        self.max_samples = max_samples
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)
        self._loaded = None
        if self.real_statistics is not None:
            stats = load_statistics(self.real_statistics)
            if "features" not in stats:
                raise ValueError(
                    "Argument `real_statistics` must name an .npz with 'features'. "
                    f"Received: real_statistics={self.real_statistics!r} "
                    f"with keys {sorted(stats)}"
                )
            features = _check_features(stats["features"], "features")
            if features.shape[1] != self.num_features:
                raise ValueError(
                    f"The features in real_statistics={self.real_statistics!r} "
                    f"have {features.shape[1]} columns, not "
                    f"num_features={self.num_features}."
                )
            self._loaded = features
        self._reservoirs = {}
        for part in ("real", "generated"):
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

    def update_state(self, real_images=None, generated_images=None):
        self._check_update(real_images, generated_images)
        for part, images in (("real", real_images), ("generated", generated_images)):
            if images is None:
                continue
            features = self.extract_features(images, f"{part}_images")
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
                ops.scatter_update(
                    reservoir, slot[:, None], ops.cast(features, "float32")
                )
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

    def save_real_statistics(self, path):
        """Saves the real set's reservoir of features to an `.npz`."""
        save_statistics(path, **self.get_real_statistics())

    def result(self):
        real = self._features("real")
        generated = self._features("generated")
        if self.subset_size > min(len(real), len(generated)):
            raise ValueError(
                "Argument `subset_size` must be at most the number of samples in "
                f"each set ({len(real)} real, {len(generated)} generated). "
                f"Received: subset_size={self.subset_size}"
            )
        mean, std = kernel_distance(
            real, generated, self.num_subsets, self.subset_size, self.seed
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
