"""Latent diffusion on keras-cv's Stable Diffusion autoencoder (optional).

Needs the `keras-cv` extra (`pip install "keras-diffusion[keras-cv]"`).
keras-cv is imported when an autoencoder is first built, not when this
package is imported, so `import keras_diffusion` works without it.

- `StableDiffusionAutoencoder`: the frozen SD VAE, serializable.
- `encode_dataset`: images -> posterior moments, once, with a progress bar.
- `latent_dataset`: the moments as a shuffled `tf.data` pipeline for `fit`.
"""

from keras_diffusion.latent.encoding import encode_dataset, latent_dataset
from keras_diffusion.latent.stable_diffusion_autoencoder import (
    SCALING_FACTOR,
    StableDiffusionAutoencoder,
)

__all__ = [
    "SCALING_FACTOR",
    "StableDiffusionAutoencoder",
    "encode_dataset",
    "latent_dataset",
]
