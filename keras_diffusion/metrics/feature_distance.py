"""What FID and KID share: the feature extractor, its checks and the two sets.

`FeatureDistance` maps image batches to features (InceptionV3, a user model
or callable, or the flattened pixels), routes `update_state`'s real and
generated batches to the subclass's `_accumulate`, and reads the real set's
statistics from an `.npz` when they were computed once beforehand.
"""

import os

import keras
from keras import ops

from keras_diffusion.metrics.statistics import load_statistics, save_statistics
from keras_diffusion.utils.checks import check_int
from keras_diffusion.utils.configurable import deserialized

INCEPTION_V3 = "inception_v3"
INCEPTION_SIZE = (299, 299)
INCEPTION_FEATURES = 2048
PARTS = ("real", "generated")


def build_inception(weights):
    """Keras' InceptionV3 without its top, average-pooled to 2048 features."""
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


def output_features(extractor):
    """The extractor's feature count from its output shape, or `None`."""
    try:
        shape = extractor.output_shape
    except Exception:  # Unbuilt layers and plain callables have none.
        return None
    if isinstance(shape, (tuple, list)) and len(shape) == 2:
        if isinstance(shape[1], int):
            return shape[1]
    return None


class FeatureDistance(keras.metrics.Metric):
    """Base of FID and KID: feature extraction and argument handling.

    Subclasses keep per-set state, updated by `_accumulate(part, features)`
    (`part` is `"real"` or `"generated"`), and define `get_real_statistics`.

    Args:
        feature_extractor: see `FrechetDistance`.
        weights: see `FrechetDistance`.
        num_features: see `FrechetDistance`.
        real_statistics: path of an `.npz` of the real set's statistics, or
            `None`.
        name: str, metric name.
        dtype: dtype of the metric.
    """

    def __init__(
        self, feature_extractor, weights, num_features, real_statistics, name, dtype
    ):
        super().__init__(name=name, dtype=dtype)
        accepted = f"'{INCEPTION_V3}', None, a Keras model or a callable"
        if isinstance(feature_extractor, str):
            if feature_extractor != INCEPTION_V3:
                raise ValueError(
                    f"Argument `feature_extractor` must be {accepted}. "
                    f"Received: feature_extractor={feature_extractor!r}"
                )
            self._extractor = build_inception(weights)
            inferred = INCEPTION_FEATURES
        elif feature_extractor is None or callable(feature_extractor):
            self._extractor = feature_extractor
            inferred = output_features(feature_extractor)
        else:
            raise TypeError(
                f"Argument `feature_extractor` must be {accepted}. "
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
        num_features = check_int("num_features", num_features, 1)
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
        self.num_features = num_features
        self.real_statistics = (
            None if real_statistics is None else os.fspath(real_statistics)
        )

    def _load_real_statistics(self, keys):
        """The arrays of `real_statistics` (which must hold `keys`), or `None`."""
        if self.real_statistics is None:
            return None
        stats = load_statistics(self.real_statistics)
        if any(key not in stats for key in keys):
            raise ValueError(
                "Argument `real_statistics` must name an .npz with "
                f"{' and '.join(map(repr, keys))}. "
                f"Received: real_statistics={self.real_statistics!r} "
                f"with keys {sorted(stats)}"
            )
        return stats

    def _check_real_width(self, what, width, unit):
        """Refuses loaded real statistics of a width other than
        `num_features`."""
        if width != self.num_features:
            raise ValueError(
                f"The {what} in real_statistics={self.real_statistics!r} "
                f"have {width} {unit}, not num_features={self.num_features}."
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

    def update_state(self, real_images=None, generated_images=None):
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
        for part, images in zip(PARTS, (real_images, generated_images), strict=True):
            if images is not None:
                features = self.extract_features(images, f"{part}_images")
                self._accumulate(part, features)

    def _accumulate(self, part, features):
        raise NotImplementedError

    def get_real_statistics(self):
        raise NotImplementedError

    def save_real_statistics(self, path):
        """Saves `get_real_statistics()` to an `.npz` (see `save_statistics`)."""
        save_statistics(path, **self.get_real_statistics())

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
        return cls(**deserialized(config, "feature_extractor"))
