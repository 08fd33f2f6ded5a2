"""Frechet distance (FID): the closed form and the streaming metric."""

import keras
import numpy as np
from keras import ops

from keras_diffusion.metrics.feature_distance import (
    INCEPTION_V3,
    PARTS,
    FeatureDistance,
)
from keras_diffusion.metrics.statistics import check_gaussian, check_same_features


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
    mu1, sigma1 = check_gaussian(mu1, sigma1, "mu1", "sigma1")
    mu2, sigma2 = check_gaussian(mu2, sigma2, "mu2", "sigma2")
    check_same_features(mu1, mu2, "mu1", "mu2")
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


@keras.saving.register_keras_serializable(package="keras_diffusion")
class FrechetDistance(FeatureDistance):
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
            feature_extractor, weights, num_features, real_statistics, name, dtype
        )
        d = self.num_features
        self._loaded = None
        stats = self._load_real_statistics(("mu", "sigma"))
        if stats is not None:
            mu, sigma = check_gaussian(stats["mu"], stats["sigma"], "mu", "sigma")
            self._check_real_width("statistics", mu.shape[0], "features")
            count = float(stats.get("num_samples", 0))
            self._loaded = {"mu": mu, "sigma": sigma, "num_samples": count}
        self._sums = {}
        for part in PARTS:
            self._sums[part] = (
                self.add_variable((), "zeros", "float64", name=f"{part}_count"),
                self.add_variable((d,), "zeros", "float64", name=f"{part}_sum"),
                self.add_variable((d, d), "zeros", "float64", name=f"{part}_outer"),
            )

    def _accumulate(self, part, features):
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

    def result(self):
        real = self._statistics("real")
        generated = self._statistics("generated")
        return frechet_distance(
            real["mu"], real["sigma"], generated["mu"], generated["sigma"]
        )
