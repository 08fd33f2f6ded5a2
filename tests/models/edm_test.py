"""DiffusionModel on an EDMSchedule: the EDM train step, sampling, saving."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DiffusionModel, EDMSchedule, HeunSampler
from keras_diffusion.utils import stateless
from tests.denoisers import conv_denoiser

FIXED_SEED = tf.constant([3, 4], dtype="int32")


def make_edm_model(jit_compile=False, **kwargs):
    model = DiffusionModel(conv_denoiser(), EDMSchedule(), **kwargs)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=jit_compile)
    return model


def test_loss_is_the_weighted_denoising_error():
    # The train loss, recomputed in float64 from the same draws:
    # lambda(sigma) ||c_skip x + c_out F - x0||^2, x = x0 + sigma n.
    schedule = EDMSchedule(sigma_data=0.6, p_mean=-0.5, p_std=1.5)
    denoiser = conv_denoiser()
    model = DiffusionModel(denoiser, schedule, ema_decay=None)
    x0 = np.random.default_rng(1).uniform(-1, 1, (6, 8, 8, 1)).astype("float32")
    got = float(model.diffusion_loss(x0, seed=FIXED_SEED))

    sigma_seed, noise_seed, _ = tf.unstack(
        tf.random.experimental.stateless_split(FIXED_SEED, 3)
    )
    sigma = schedule.draw_sigmas(6, sigma_seed).numpy().astype(np.float64)
    noise = stateless.normal((6, 8, 8, 1), noise_seed).numpy().astype(np.float64)
    s = sigma[:, None, None, None]
    x = x0 + s * noise
    out = denoiser(
        [(schedule.c_in(s) * x).astype("float32"), np.log(sigma).astype("float32") / 4]
    ).numpy()
    denoised = schedule.c_skip(s) * x + schedule.c_out(s) * out
    per_example = np.mean((denoised - x0) ** 2, axis=(1, 2, 3))
    want = np.mean(schedule.loss_weight(sigma) * per_example)
    assert got == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fresh_log_normal_sigmas_every_step(toy_images, jit_compile):
    denoiser = conv_denoiser(record=True)
    model = DiffusionModel(denoiser, EDMSchedule(), ema_decay=None)
    model.compile(optimizer="sgd", steps_per_execution=4, jit_compile=jit_compile)
    model.fit(toy_images, epochs=1, batch_size=8, verbose=0)
    recorder = denoiser.get_layer("timestep_recorder")
    steps = len(toy_images) // 8
    assert int(recorder.count.numpy()) == steps
    means = recorder.history.numpy()[:steps]
    assert len(np.unique(np.round(means, 4))) == steps
    # c_noise = ln(sigma) / 4 with ln(sigma) ~ N(p_mean, p_std**2).
    std_of_mean = 1.2 / 4 / np.sqrt(steps * 8)
    assert abs(means.mean() - (-1.2 / 4)) < 4.5 * std_of_mean


def test_same_seed_same_training_other_seed_other(toy_images):
    weights = []
    for seed in (5, 5, 6):
        keras.utils.set_random_seed(7)
        model = make_edm_model(seed=seed)
        model.fit(toy_images[:32], epochs=1, batch_size=16, verbose=0, shuffle=False)
        weights.append([v.numpy() for v in model.denoiser.trainable_variables])
    for a, b in zip(weights[0], weights[1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(
        not np.array_equal(a, c) for a, c in zip(weights[0], weights[2], strict=True)
    )


def test_a_tiny_edm_model_learns_the_toy_data(toy_images):
    keras.utils.set_random_seed(3)
    model = make_edm_model(jit_compile=True)
    before = float(model.diffusion_loss(toy_images, seed=FIXED_SEED))
    model.fit(toy_images, epochs=8, batch_size=16, verbose=0)
    after = float(model.diffusion_loss(toy_images, seed=FIXED_SEED))
    # Measured: 1.73 -> 0.97, a factor 0.56.
    assert after < 0.7 * before, (before, after)


def test_generate_defaults_to_heun_18_and_round_trips(toy_images, tmp_path):
    model = make_edm_model(seed=2)
    model.fit(toy_images[:32], epochs=1, batch_size=16, verbose=0)
    images = model.generate(2, seed=4)
    np.testing.assert_array_equal(
        images, model.generate(2, sampler=HeunSampler(18), seed=4)
    )
    assert images.shape == (2, 8, 8, 1) and np.isfinite(images).all()

    path = str(tmp_path / "edm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.schedule, EDMSchedule)
    assert loaded.schedule.get_config() == model.schedule.get_config()
    np.testing.assert_allclose(loaded.generate(2, seed=4), images, atol=1e-6)
    model.fit(toy_images[:16], epochs=1, batch_size=16, verbose=0, shuffle=False)
    loaded.fit(toy_images[:16], epochs=1, batch_size=16, verbose=0, shuffle=False)
    for a, b in zip(
        loaded.denoiser.trainable_variables,
        model.denoiser.trainable_variables,
        strict=True,
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


def test_conditional_edm_with_class_dropout_and_guidance(toy_images):
    # A conditional conv denoiser: EDM's labels, class dropout and guidance
    # are the model's; the conditional U-Net trains in diffusion_model_test.
    model = DiffusionModel(
        conv_denoiser(num_classes=3),
        EDMSchedule(),
        num_classes=3,
        class_dropout=0.2,
        seed=1,
    )
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    labels = np.arange(64) % 3
    history = model.fit(
        toy_images[:32], labels[:32], epochs=1, batch_size=16, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()
    sampler = HeunSampler(3)
    plain = model.generate(3, sampler=sampler, labels=[0, 1, 2], seed=0)
    guided = model.generate(
        3, sampler=sampler, labels=[0, 1, 2], guidance_scale=3.0, seed=0
    )
    assert np.isfinite(guided).all()
    assert np.abs(guided - plain).max() > 1e-4


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"prediction_type": "v_prediction"}, "prediction_type='v_prediction'"),
        ({"loss_weighting": "min_snr"}, "loss_weighting='min_snr'"),
    ],
)
def test_options_that_do_not_apply_to_edm_are_refused(make_unet, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment) as info:
        DiffusionModel(make_unet(), EDMSchedule(), **kwargs)
    assert "EDMSchedule" in str(info.value)


def test_edm_holds_no_objective_setting_and_answers_what_it_predicts(make_unet):
    schedule = EDMSchedule()
    assert not {"prediction_type", "loss_weighting"} & set(schedule.get_config())
    # Its own prediction given again changes nothing.
    model = DiffusionModel(make_unet(), schedule, prediction_type="epsilon")
    assert model.schedule is schedule and model.prediction_type == "epsilon"


def test_a_ddim_sampler_is_refused_on_an_edm_model(make_unet):
    from keras_diffusion import DDIMSampler

    model = DiffusionModel(make_unet(), EDMSchedule())
    with pytest.raises(ValueError, match="DDIMSampler"):
        model.generate(1, sampler=DDIMSampler(5), seed=0)


def test_sample_to_files_defaults_to_heun_18_on_edm(tmp_path):
    from keras_diffusion.run import generation
    from keras_diffusion.utils import images as images_lib

    model = make_edm_model(seed=3)
    written = generation.sample_to_files(
        model, str(tmp_path), num_images=2, grid=False, npz=True
    )
    pixels = np.load(written["npz"])["images"]
    want = images_lib.to_uint8(model.generate(2, sampler=HeunSampler(18), seed=0))
    np.testing.assert_array_equal(pixels, want)


def test_the_terminal_error_check_says_it_does_not_apply(toy_images):
    from keras_diffusion.diagnostics import measure_terminal_error

    with pytest.raises(ValueError, match="EDMSchedule"):
        measure_terminal_error(make_edm_model(), toy_images[:4])
