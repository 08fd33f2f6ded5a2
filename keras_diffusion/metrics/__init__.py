"""Sample-quality metrics: Frechet distance (FID) and kernel distance (KID).

Both metrics embed images with a feature extractor (by default Keras'
InceptionV3 with ImageNet weights) and compare the real and generated feature
distributions. `update_state` runs in `keras.ops` (on the device, usable in a
compiled function); `result` is host-side NumPy maths on the small final
statistics, so neither metric is meant for `model.compile(metrics=...)`.

- `frechet.py`: `frechet_distance` and the streaming `FrechetDistance`;
- `kernel.py`: `kernel_distance` and the reservoir-sampled `KernelDistance`;
- `feature_distance.py`: the feature extraction both metrics share;
- `statistics.py`: `.npz` statistics files and their checks;
- `native.py`: `PCAFrechet`, a cheap Frechet distance of pixels at a native
  resolution over a real floor (no pretrained network), and `area_downsample`.
"""

from keras_diffusion.metrics.feature_distance import (
    INCEPTION_FEATURES,
    INCEPTION_SIZE,
    INCEPTION_V3,
    FeatureDistance,
)
from keras_diffusion.metrics.frechet import FrechetDistance, frechet_distance
from keras_diffusion.metrics.kernel import KernelDistance, kernel_distance
from keras_diffusion.metrics.native import (
    PCAFrechet,
    area_downsample,
    feature_frechet_distance,
)
from keras_diffusion.metrics.statistics import load_statistics, save_statistics

__all__ = [
    "INCEPTION_FEATURES",
    "INCEPTION_SIZE",
    "INCEPTION_V3",
    "FeatureDistance",
    "FrechetDistance",
    "KernelDistance",
    "PCAFrechet",
    "area_downsample",
    "feature_frechet_distance",
    "frechet_distance",
    "kernel_distance",
    "load_statistics",
    "save_statistics",
]
