"""StableDiffusionAutoencoder: keras-cv's SD VAE, frozen and serializable."""

import os
import random

import keras
import tensorflow as tf
from keras import ops

# The factor that gives SD latents roughly unit variance (Rombach et al., 2022).
SCALING_FACTOR = 0.18215
LATENT_CHANNELS = 4
DOWNSAMPLING = 8
_INSTALL = (
    'pip install "keras-diffusion[keras-cv]" (from a checkout: '
    'pip install ".[keras-cv]")'
)


def import_stable_diffusion():
    """keras-cv's `stable_diffusion` models module, imported on first use."""
    try:
        from keras_cv.models import stable_diffusion
    except ImportError as error:
        raise ImportError(
            "keras_diffusion.latent needs keras-cv 0.9.0, an optional extra: "
            f"{_INSTALL}. ({error})"
        ) from error
    return stable_diffusion


def _check_image_shape(image_shape):
    try:
        shape = tuple(int(d) for d in image_shape)
    except (TypeError, ValueError):
        shape = None
    if (
        shape is None
        or len(shape) != 3
        or shape[2] != 3
        or min(shape[:2]) < DOWNSAMPLING
        or any(d % DOWNSAMPLING for d in shape[:2])
    ):
        raise ValueError(
            "Argument `image_shape` must be (height, width, 3) with height and "
            f"width positive multiples of {DOWNSAMPLING}. "
            f"Received: image_shape={image_shape!r}"
        )
    return shape


def _check_weights(weights):
    """`None`, `"keras-cv"`, or an `(encoder, decoder)` pair of existing paths."""
    if weights is None or weights == "keras-cv":
        return weights
    import h5py  # a dependency of Keras

    if (
        isinstance(weights, (tuple, list))
        and len(weights) == 2
        and all(isinstance(p, (str, os.PathLike)) for p in weights)
    ):
        paths = tuple(os.fspath(p) for p in weights)
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(
                    "Argument `weights` names a file that does not exist: "
                    f"{path!r}. Received: weights={weights!r}"
                )
            # Checked before the 84 M parameters are built: a truncated or
            # mistaken download fails here, in milliseconds.
            if not h5py.is_hdf5(path):
                raise ValueError(
                    f"Argument `weights`: {path!r} is not an HDF5 (.h5) file, so "
                    "not a keras-cv Stable Diffusion weight file. "
                    f"Received: weights={weights!r}"
                )
        return paths
    raise ValueError(
        "Argument `weights` must be None (random), 'keras-cv' (download) or a "
        "pair of local .h5 paths (encoder, decoder). "
        f"Received: weights={weights!r}"
    )


def _load(model, path, part, weights):
    try:
        model.load_weights(path)
    except Exception as error:  # h5py, legacy-format and shape errors alike
        raise ValueError(
            f"Argument `weights`: {path!r} is not a keras-cv Stable Diffusion "
            f"{part} weight file ({type(error).__name__}: {error}). "
            f"Received: weights={weights!r}"
        ) from error


def posterior_draw(moments, sample_posterior=True, seed=None):
    """A draw of the VAE posterior of `moments` `concatenate([mean, logvar],
    axis=-1)`: `mean + exp(logvar / 2) * eps` (the log-variance clipped to
    [-30, 20], as the SD training code), or the mean when not
    `sample_posterior`; unscaled.

    Args:
        moments: float tensor `(n, h, w, 2c)`.
        sample_posterior: bool. Defaults to `True`.
        seed: an int, an int32 tensor of shape `(2,)` (a stateless seed, what
            `DiffusionModel` passes from its own seed generator), or `None`
            for a fresh draw. Defaults to `None`.
    """
    mean, logvar = ops.split(ops.cast(moments, "float32"), 2, axis=-1)
    if not sample_posterior:
        return mean
    if seed is None:
        seed = random.randint(0, 2**31 - 1)
    if isinstance(seed, int):
        seed = tf.constant([seed, 0], "int32")
    eps = tf.random.stateless_normal(ops.shape(mean), seed=seed)
    std = ops.exp(0.5 * ops.clip(logvar, -30.0, 20.0))
    return mean + std * eps


@keras.saving.register_keras_serializable(package="keras_diffusion")
class StableDiffusionAutoencoder(keras.Model):
    """The Stable Diffusion VAE of keras-cv, frozen, for latent diffusion.

    Wraps `keras_cv.models.stable_diffusion.ImageEncoder` and `Decoder`. Images
    in [-1, 1] of shape `image_shape` map to latents of shape
    `(height / 8, width / 8, 4)`, scaled by 0.18215 to roughly unit variance.
    All weights are frozen. The config holds only `image_shape`,
    `sample_posterior` and `weights`; `from_config` rebuilds keras-cv's models
    from it (their own configs do not load back), and the weights come from the
    `.keras` file itself, never from the weight source, so a saved model loads
    without keras-cv's download or the original `.h5` files.

    Needs the optional extra: `pip install "keras-diffusion[keras-cv]"`.

    Args:
        image_shape: `(height, width, 3)`, height and width multiples of 8.
        sample_posterior: bool, `encode` (and a `DiffusionModel` training on
            cached moments) draws `mean + exp(logvar / 2) * eps` rather than
            taking the mean. Defaults to `True`.
        weights: `None` (random, for tests), `"keras-cv"` (keras-cv downloads
            the real weights, online only), or a pair of local files
            `(encoder_h5, decoder_h5)` such as keras-cv's `vae_encoder.h5` and
            `kcv_decoder.h5`. Defaults to `None`. Stored as `weights_source`
            (`weights` is Keras' list of variables).

    Example:

    ```python
    ae = keras_diffusion.latent.StableDiffusionAutoencoder(
        (256, 256, 3), weights=("vae_encoder.h5", "kcv_decoder.h5")
    )
    latents = ae.encode(images, seed=0)   # (n, 32, 32, 4)
    images = ae.decode(latents)           # (n, 256, 256, 3) in [-1, 1]
    ```

    Reference:
        - [Rombach et al., 2022](https://arxiv.org/abs/2112.10752)
    """

    def __init__(self, image_shape, sample_posterior=True, weights=None, **kwargs):
        image_shape = _check_image_shape(image_shape)
        if not isinstance(sample_posterior, bool):
            raise TypeError(
                "Argument `sample_posterior` must be a bool. "
                f"Received: sample_posterior={sample_posterior!r}"
            )
        weights = _check_weights(weights)
        stable_diffusion = import_stable_diffusion()
        super().__init__(**kwargs)
        self.image_shape = image_shape
        self.sample_posterior = sample_posterior
        self.weights_source = weights
        height, width, _ = image_shape
        download = weights == "keras-cv"
        try:
            self.encoder = stable_diffusion.ImageEncoder(download_weights=download)
            self.decoder = stable_diffusion.Decoder(
                height, width, download_weights=download
            )
        except Exception as error:
            if not download:
                raise
            raise ValueError(
                "Argument `weights`: keras-cv could not download the Stable "
                f"Diffusion VAE weights ({type(error).__name__}: {error}). "
                "Offline, pass local files (encoder_h5, decoder_h5). "
                f"Received: weights={weights!r}"
            ) from error
        if isinstance(weights, tuple):
            _load(self.encoder, weights[0], "encoder", weights)
            _load(self.decoder, weights[1], "decoder", weights)
        self.encoder.trainable = False
        self.decoder.trainable = False
        self.trainable = False
        self.built = True

    @property
    def latent_shape(self):
        """`(height / 8, width / 8, 4)`: the shape of one latent."""
        height, width, _ = self.image_shape
        return (height // DOWNSAMPLING, width // DOWNSAMPLING, LATENT_CHANNELS)

    def encode_moments(self, images):
        """The posterior's `(mean, logvar)`, unscaled, each `(n, h, w, 4)`.

        The log-variance is clipped to [-30, 20] as in the SD training code.
        """
        x = ops.convert_to_tensor(images, "float32")
        # The encoder's last layer keeps the mean only, scaled; skip it.
        for layer in self.encoder.layers[:-1]:
            x = layer(x, training=False)
        mean, logvar = ops.split(ops.cast(x, "float32"), 2, axis=-1)
        return mean, ops.clip(logvar, -30.0, 20.0)

    def sample_latents(self, moments, seed=None):
        """Scaled latents from moments `concatenate([mean, logvar], axis=-1)`.

        Args:
            moments: float tensor `(n, h, w, 8)`, as `encode_dataset` caches.
            seed: an int, an int32 tensor of shape `(2,)` (a stateless seed,
                what `DiffusionModel` passes from its own seed generator), or
                `None` for a fresh draw. Unused when `sample_posterior=False`.
        """
        return posterior_draw(moments, self.sample_posterior, seed) * SCALING_FACTOR

    def encode(self, images, seed=None):
        """Scaled latents of images in [-1, 1]: a posterior sample or the mean.

        Args:
            images: float `(n, height, width, 3)` in [-1, 1].
            seed: see `sample_latents`.
        """
        mean, logvar = self.encode_moments(images)
        return self.sample_latents(ops.concatenate([mean, logvar], axis=-1), seed)

    def scaled(self, z):
        """Latents of unscaled posterior values `z`."""
        return z * SCALING_FACTOR

    def encode_mean(self, images):
        """Scaled latents of images in [-1, 1]: the posterior mean, as the
        editing methods of `DiffusionModel` encode their input."""
        mean, _ = self.encode_moments(images)
        return mean * SCALING_FACTOR

    def decode(self, latents):
        """Images in [-1, 1] of scaled latents `(n, h, w, 4)`."""
        # keras-cv's decoder begins with Rescaling(1 / 0.18215).
        images = self.decoder(ops.convert_to_tensor(latents, "float32"))
        return ops.clip(ops.cast(images, "float32"), -1.0, 1.0)

    def call(self, images):
        return self.decode(self.encode(images))

    def get_config(self):
        config = super().get_config()
        source = self.weights_source
        config.update(
            {
                "image_shape": list(self.image_shape),
                "sample_posterior": self.sample_posterior,
                "weights": list(source) if isinstance(source, tuple) else source,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        source = config.pop("weights", None)
        # The weights are in the .keras file: build with random ones, which
        # loading overwrites, rather than download or read the source again.
        model = cls(**config)
        model.weights_source = tuple(source) if isinstance(source, list) else source
        return model
