import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DDIMSampler, DiffusionModel, NoiseSchedule, UNet
from keras_diffusion.latent import SCALING_FACTOR, encode_dataset, latent_dataset

pytest.importorskip("keras_cv")
# One worker builds the session's keras-cv models (conftest.py) for them all.
pytestmark = pytest.mark.xdist_group("latent")

SAMPLER = DDIMSampler(num_steps=3)


def make_model(autoencoder, seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    # One level: the train step compiles in half the time of two.
    unet = UNet(autoencoder.latent_shape, widths=(8,), num_res_blocks=1, groups=4)
    model = DiffusionModel(
        unet,
        NoiseSchedule(100, "cosine"),
        autoencoder=autoencoder,
        seed=seed,
        **kwargs,
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


def test_unit_variance_latents_pass_through_fit_and_generate_unclipped(
    autoencoder,
):
    latents = np.random.default_rng(0).normal(size=(8, 8, 8, 4)).astype("float32")
    assert np.abs(latents).max() > 2.0
    model = make_model(autoencoder)
    history = model.fit(latents, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    samples = model.generate(3, sampler=SAMPLER, seed=0, decode=False)
    assert samples.shape == (3, 8, 8, 4)
    assert np.abs(samples).max() > 1.0  # no clipping in latent space
    # The pixel path keeps its [-1, 1] check on the same data.
    pixel_model = DiffusionModel(UNet((8, 8, 4), widths=(8,), num_res_blocks=1))
    with pytest.raises(ValueError, match=r"scaled to \[-1, 1\]"):
        pixel_model.fit(latents, epochs=1, verbose=0)


def test_train_step_samples_the_posterior_from_moments(autoencoder):
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(4, 8, 8, 4)).astype("float32")
    # The target is x0 itself: the loss sees which latents were drawn.
    model = make_model(autoencoder, prediction_type="sample")
    seed = tf.constant([5, 6], "int32")
    # A posterior of (almost) zero variance: the loss of its scaled mean.
    certain = np.concatenate([mean, np.full_like(mean, -30.0)], axis=-1)
    on_mean = model.diffusion_loss(mean * SCALING_FACTOR, seed=seed)
    np.testing.assert_allclose(
        float(model.diffusion_loss(certain, seed=seed)), float(on_mean), rtol=1e-5
    )
    # A wide posterior: a sample far from the mean, so another loss.
    wide = np.concatenate([mean, np.full_like(mean, 4.0)], axis=-1)
    assert abs(float(model.diffusion_loss(wide, seed=seed)) - float(on_mean)) > 1e-3


def test_a_batch_of_the_wrong_shape_is_refused(autoencoder):
    model = make_model(autoencoder)
    with pytest.raises(ValueError, match=r"latents \(batch, 8, 8, 4\)"):
        model.fit(np.zeros((4, 64, 64, 3), "float32"), epochs=1, verbose=0)
    with pytest.raises(ValueError, match="latent shape"):
        DiffusionModel(UNet((16, 16, 4), widths=(8,)), autoencoder=autoencoder)


def run_end_to_end(autoencoder, pixels, cache):
    moments, labels = encode_dataset(autoencoder, pixels, cache=cache, verbose=0)
    model = make_model(autoencoder, seed=3)
    history = model.fit(
        latent_dataset(moments, batch_size=2, seed=3),
        epochs=2,
        verbose=0,
        shuffle=False,  # the pipeline shuffles
    )
    images = model.generate(2, sampler=SAMPLER, seed=11)
    return moments, labels, history.history["loss"], images, model


def test_end_to_end_is_deterministic_and_the_keras_file_round_trips(
    autoencoder, pixels, tmp_path
):
    cache = str(tmp_path / "moments.npz")
    moments, labels, losses, images, model = run_end_to_end(autoencoder, pixels, cache)
    assert moments.shape == (4, 8, 8, 8) and labels is None
    assert images.shape == (2, 64, 64, 3)
    assert images.min() >= -1.0 and images.max() <= 1.0
    # Again, with the moments read back from the cache: the same run.
    again = run_end_to_end(autoencoder, None, cache)
    np.testing.assert_array_equal(again[0], moments)
    assert again[2] == losses
    np.testing.assert_array_equal(again[3], images)

    path = str(tmp_path / "latent.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.autoencoder.get_config() == autoencoder.get_config()
    np.testing.assert_array_equal(loaded.generate(2, sampler=SAMPLER, seed=11), images)
    history = loaded.fit(
        latent_dataset(moments, batch_size=2, seed=3),
        epochs=1,
        verbose=0,
        shuffle=False,
    )
    assert np.isfinite(history.history["loss"][0])


def test_a_cache_of_another_shape_is_refused(autoencoder, tmp_path):
    cache = tmp_path / "other.npz"
    np.savez(cache, moments=np.zeros((2, 4, 4, 8), "float32"))
    with pytest.raises(ValueError, match="other.npz"):
        encode_dataset(autoencoder, None, cache=str(cache))


def test_inpaint_and_img2img_edit_on_the_latent_grid(autoencoder, pixels):
    model = make_model(autoencoder)
    images = pixels[:2]
    # Nothing to fill: the decoded posterior mean of the input, the kept
    # region's reconstruction (not the input itself).
    kept = model.inpaint(images, np.zeros((64, 64)), sampler=SAMPLER, seed=0)
    mean = autoencoder.decode(autoencoder.encode_mean(images)).numpy()
    np.testing.assert_allclose(kept, mean, atol=1e-4)  # the decoder, compiled
    # Everything to fill: generate's images, the same seed.
    filled = model.inpaint(images, np.ones((64, 64)), sampler=SAMPLER, seed=3)
    np.testing.assert_allclose(
        filled, model.generate(2, sampler=SAMPLER, seed=3), atol=1e-4
    )
    # A mask edge inside an 8x8 block fills that block's whole latent cell.
    mask = np.zeros((64, 64))
    mask[28:] = 1.0
    half = model.inpaint(images, mask, sampler=SAMPLER, seed=3)
    assert half.shape == images.shape and np.isfinite(half).all()
    assert np.abs(half[:, 48:] - mean[:, 48:]).mean() > 1e-3  # filled anew
    edited = model.img2img(images, 0.5, sampler=SAMPLER, seed=0)
    assert edited.shape == images.shape and np.isfinite(edited).all()
