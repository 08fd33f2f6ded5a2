import numpy as np
import pytest

from keras_diffusion.latent import SCALING_FACTOR, StableDiffusionAutoencoder

pytest.importorskip("keras_cv")
# One worker builds the session's keras-cv models (conftest.py) for them all.
pytestmark = pytest.mark.xdist_group("latent")


def test_weights_from_local_files_reproduce_keras_cv(reference, autoencoder, pixels):
    encoder, decoder, _ = reference
    np.testing.assert_array_equal(
        np.asarray(autoencoder.encoder(pixels[:2])), np.asarray(encoder(pixels[:2]))
    )
    latents = np.random.default_rng(0).normal(size=(2, 8, 8, 4)).astype("float32")
    np.testing.assert_array_equal(
        np.asarray(autoencoder.decoder(latents)), np.asarray(decoder(latents))
    )


def test_encode_is_the_scaled_mean_and_decode_inverts_the_scale(
    reference, autoencoder, pixels
):
    encoder, decoder, _ = reference
    assert autoencoder.latent_shape == (8, 8, 4)
    mean, logvar = autoencoder.encode_moments(pixels[:2])
    assert mean.shape == logvar.shape == (2, 8, 8, 4)
    # keras-cv's encoder output is the posterior mean times 0.18215.
    np.testing.assert_allclose(
        np.asarray(mean) * SCALING_FACTOR, np.asarray(encoder(pixels[:2])), atol=1e-6
    )
    autoencoder.sample_posterior = False
    try:
        np.testing.assert_allclose(
            np.asarray(autoencoder.encode(pixels[:2])),
            np.asarray(mean) * SCALING_FACTOR,
            atol=1e-6,
        )
    finally:
        autoencoder.sample_posterior = True
    # decode(0.18215 m) is the decoder after its Rescaling applied to m.
    images = np.asarray(autoencoder.decode(np.asarray(mean) * SCALING_FACTOR))
    x = mean
    for layer in decoder.layers[1:]:
        x = layer(x)
    assert images.shape == (2, 64, 64, 3)
    np.testing.assert_allclose(images, np.clip(np.asarray(x), -1, 1), atol=1e-4)
    assert images.min() >= -1.0 and images.max() <= 1.0


def test_log_variance_is_clipped(autoencoder, pixels):
    # Shift the last layer's log-variance biases far out, then restore them.
    bias = autoencoder.encoder.layers[-2].weights[-1]
    original = np.asarray(bias)
    shift = np.array([0, 0, 0, 0, 50, 50, -50, -50], "float32")
    bias.assign(original + shift)
    try:
        _, logvar = autoencoder.encode_moments(pixels[:1])
    finally:
        bias.assign(original)
    logvar = np.asarray(logvar)
    np.testing.assert_array_equal(logvar[..., :2], 20.0)
    np.testing.assert_array_equal(logvar[..., 2:], -30.0)


def test_keras_cv_download_failure_is_a_clear_error(monkeypatch):
    import keras

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(keras.utils, "get_file", offline)
    with pytest.raises(ValueError, match="could not download.*weights='keras-cv'"):
        StableDiffusionAutoencoder((64, 64, 3), weights="keras-cv")


def test_posterior_sample_is_seeded_and_distributed_as_the_posterior(
    autoencoder, pixels
):
    mean, logvar = (np.asarray(m) for m in autoencoder.encode_moments(pixels))
    moments = np.concatenate([mean, logvar], axis=-1)
    first = np.asarray(autoencoder.sample_latents(moments, seed=3))
    np.testing.assert_array_equal(
        first, np.asarray(autoencoder.sample_latents(moments, seed=3))
    )
    other = np.asarray(autoencoder.sample_latents(moments, seed=4))
    assert not np.allclose(first, other)
    assert not np.allclose(first, mean * SCALING_FACTOR)
    # (z / s - mean) / std is standard normal.
    eps = (first / SCALING_FACTOR - mean) / np.exp(0.5 * logvar)
    assert abs(eps.mean()) < 0.15 and abs(eps.std() - 1.0) < 0.15
    # encode draws the same sample as encode_moments then sample_latents.
    np.testing.assert_allclose(
        np.asarray(autoencoder.encode(pixels, seed=3)), first, atol=1e-6
    )


def test_config_holds_plain_values(autoencoder, reference):
    config = autoencoder.get_config()
    assert config["image_shape"] == [64, 64, 3]
    assert config["sample_posterior"] is True
    assert config["weights"] == list(reference[2])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"image_shape": (60, 64, 3)}, "image_shape"),
        ({"image_shape": (64, 64, 1)}, "image_shape"),
        ({"image_shape": (64, 64, 3), "weights": "sd"}, "weights='sd'"),
        ({"image_shape": (64, 64, 3), "weights": ("a.h5",)}, "weights"),
        ({"image_shape": (64, 64, 3), "weights": ("no.h5", "no.h5")}, "no.h5"),
        ({"image_shape": (64, 64, 3), "sample_posterior": 1}, "sample_posterior"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        StableDiffusionAutoencoder(**kwargs)


def test_a_wrong_or_corrupt_weight_file_is_a_clear_error(reference, tmp_path):
    encoder_h5, decoder_h5 = reference[2]
    with pytest.raises(ValueError, match="not a keras-cv Stable Diffusion encoder"):
        StableDiffusionAutoencoder((64, 64, 3), weights=(decoder_h5, decoder_h5))
    corrupt = tmp_path / "corrupt.h5"
    corrupt.write_bytes(b"not an hdf5 file" * 64)
    with pytest.raises(ValueError, match="corrupt.h5.*not an HDF5"):
        StableDiffusionAutoencoder((64, 64, 3), weights=(encoder_h5, str(corrupt)))
