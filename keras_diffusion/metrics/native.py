"""Frechet distance at a data set's native resolution, over a real floor.

A cheap judge of samples as a distribution, without a pretrained network:

- `area_downsample` brings images to a small native grid (block means), where
  a few thousand images describe the distribution well;
- `PCAFrechet` projects those pixels onto a PCA fitted on half A of the real
  images, and measures the Frechet distance of a sample to half B. Its
  `floor` is the distance of as many real images of half A to half B: equal
  sample sizes give both the same finite-sample bias, so real images score
  about 1 in units of the floor.

`keras_diffusion.evaluation.digits_quality` and
`keras_diffusion.evaluation.folder_quality` are built on it. NumPy only: the
PCA is the eigendecomposition of half A's covariance (as scikit-learn's
`PCA(svd_solver="covariance_eigh")`).
"""

import numpy as np

from keras_diffusion.metrics.frechet import frechet_distance
from keras_diffusion.metrics.statistics import check_features, check_same_features
from keras_diffusion.utils.checks import check_int


def area_downsample(images, size):
    """Block means of `(n, height, width, channels)` images, to `size`.

    Args:
        images: array of shape `(n, height, width, channels)`.
        size: int or `(height, width)`, dividing the images' height and width.

    Returns:
        float64 array `(n, size_h, size_w, channels)`.
    """
    images = np.asarray(images, np.float64)
    if images.ndim != 4:
        raise ValueError(
            "Argument `images` must have shape (n, height, width, channels). "
            f"Received: images.shape={images.shape}"
        )
    out_h, out_w = (size, size) if np.isscalar(size) else size
    n, h, w, c = images.shape
    if h % out_h or w % out_w:
        raise ValueError(
            f"Argument `size` must divide the images' height and width {(h, w)}. "
            f"Received: size={size!r}"
        )
    grid = images.reshape(n, out_h, h // out_h, out_w, w // out_w, c)
    return grid.mean(axis=(2, 4))


def feature_frechet_distance(a, b):
    """Frechet distance of the Gaussians fitted to two `(n, d)` feature sets."""
    a = check_features(a, "a")
    b = check_features(b, "b")
    return frechet_distance(
        a.mean(0), np.cov(a, rowvar=False), b.mean(0), np.cov(b, rowvar=False)
    )


class PCAFrechet:
    """Frechet distance in a PCA space of real features, over a real floor.

    Args:
        half_a: `(n_a, d)` real features: the PCA is fitted on them, and the
            floor takes its first `num_samples`.
        half_b: `(n_b, d)` real features: the reference set.
        num_samples: int, the sample size the floor is measured at; a sample
            scored must have exactly this many. Defaults to `len(half_a)`.
        num_components: int, PCA components, capped at `num_samples - 1` and
            at `d`. Defaults to `20`.

    Attributes:
        floor: float, the distance of `num_samples` features of half A to
            half B.
        num_components: int, the components used (after the cap).
    """

    def __init__(self, half_a, half_b, num_samples=None, num_components=20):
        half_a = check_features(half_a, "half_a")
        half_b = check_features(half_b, "half_b")
        check_same_features(half_a, half_b, "half_a", "half_b")
        num_samples = len(half_a) if num_samples is None else num_samples
        self.num_samples = check_int("num_samples", num_samples, 2)
        if num_samples > len(half_a) or len(half_b) < 2:
            raise ValueError(
                f"Argument `num_samples` must be at most {len(half_a)} (half A), "
                f"with half B at least 2 ({len(half_b)}). "
                f"Received: num_samples={num_samples!r}"
            )
        check_int("num_components", num_components, 1)
        self.num_components = min(num_components, num_samples - 1, half_a.shape[1])
        self._mean = half_a.mean(axis=0)
        centered = half_a - self._mean
        _, eigenvectors = np.linalg.eigh(centered.T @ centered)
        # eigh sorts eigenvalues up: the last columns are the top components.
        self._components = eigenvectors[:, ::-1][:, : self.num_components]
        self._reference = self.project(half_b)
        self.floor = self.distance(half_a[:num_samples])

    def project(self, features):
        """`(n, d)` features onto the principal components: `(n, k)`."""
        return (check_features(features, "features") - self._mean) @ self._components

    def distance(self, features):
        """Frechet distance of `num_samples` `(n, d)` features to half B."""
        features = check_features(features, "features")
        if len(features) != self.num_samples:
            raise ValueError(
                f"Score exactly num_samples={self.num_samples} images, the size "
                f"the floor is measured at. Received: {len(features)}"
            )
        return feature_frechet_distance(self.project(features), self._reference)
