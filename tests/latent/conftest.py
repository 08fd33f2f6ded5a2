"""Shared fixtures of the latent tests: keras-cv models are slow to build
(84 M parameters), so each is built once per session.

A test that needs keras-cv skips itself (`pytest.importorskip("keras_cv")`)
when the `keras-cv` extra is absent; the fixtures import keras-cv only when
used.
"""

import numpy as np
import pytest

IMAGE_SHAPE = (64, 64, 3)


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """keras-cv's own encoder and decoder (random weights) and their files.

    Written as legacy `.h5` (`model.save`), the format of keras-cv's released
    `vae_encoder.h5` / `kcv_decoder.h5`, whose weights load by layer order.
    """
    import keras
    from keras_cv.models.stable_diffusion import Decoder, ImageEncoder

    keras.utils.set_random_seed(7)
    encoder = ImageEncoder(download_weights=False)
    decoder = Decoder(IMAGE_SHAPE[0], IMAGE_SHAPE[1], download_weights=False)
    folder = tmp_path_factory.mktemp("sd_weights")
    paths = (str(folder / "vae_encoder.h5"), str(folder / "kcv_decoder.h5"))
    encoder.save(paths[0])
    decoder.save(paths[1])
    return encoder, decoder, paths


@pytest.fixture(scope="session")
def autoencoder(reference):
    """The wrapper, loaded from the reference's local files."""
    from keras_diffusion.latent import StableDiffusionAutoencoder

    return StableDiffusionAutoencoder(IMAGE_SHAPE, weights=reference[2])


@pytest.fixture(scope="session")
def pixels():
    """Four smooth 64x64 RGB images in [-1, 1]."""
    yy, xx = np.mgrid[:64, :64] / 63.0
    images = [
        np.stack([np.sin(3 * xx + k), np.cos(2 * yy - k), xx * yy * 2 - 1], -1)
        for k in range(4)
    ]
    return np.clip(np.stack(images), -1, 1).astype("float32")
