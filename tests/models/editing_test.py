"""DiffusionModel.inpaint and img2img: the known answers, every schedule,
guidance, the Gaussian conditional mean, and the refusals."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import (
    DDIMSampler,
    DiffusionModel,
    DPMSolverSampler,
    EDMSchedule,
    EulerSampler,
    FlowMatchSchedule,
    HeunSampler,
    NoiseSchedule,
)
from keras_diffusion.models.editing import warn_if_rounded
from keras_diffusion.samplers import RePaintSampler
from tests.denoisers import tiny_unet

SHAPE = (3, 8, 8, 1)


def _images():
    return np.random.default_rng(0).uniform(-1, 1, SHAPE).astype("float32")


def _bottom_half():
    mask = np.zeros((8, 8), "float32")
    mask[4:] = 1.0
    return mask


# One-level U-Nets: the edits do not depend on the depth (a fresh U-Net of
# any depth predicts zeros), and their traces are shorter.
ONE_LEVEL = (4,)


@pytest.fixture(scope="module")
def vp_model():
    return DiffusionModel(
        tiny_unet(widths=ONE_LEVEL),
        NoiseSchedule(100, "cosine"),
        prediction_type="v_prediction",
        seed=0,
    )


def test_the_known_answers(vp_model):
    images, sampler = _images(), DDIMSampler(8)
    generated = vp_model.generate(3, sampler=sampler, seed=5, verbose=0)
    # A mask of ones is generate; a mask of zeros leaves the input.
    ones = vp_model.inpaint(images, np.ones((8, 8)), sampler=sampler, seed=5, verbose=0)
    np.testing.assert_allclose(ones, generated, atol=1e-6)
    zeros = vp_model.inpaint(images, np.zeros((8, 8)), sampler=sampler, seed=5)
    np.testing.assert_array_equal(zeros, images)
    # The kept region is the input; the filled one is the model's.
    half = vp_model.inpaint(images, _bottom_half(), sampler=sampler, seed=5, verbose=0)
    np.testing.assert_array_equal(half[:, :4], images[:, :4])
    assert np.abs(half[:, 4:] - images[:, 4:]).mean() > 0.1
    # Strength 0 is the input, 1 is generate; between, the input shows.
    np.testing.assert_array_equal(
        vp_model.img2img(images, 0.0, sampler=sampler), images
    )
    full = vp_model.img2img(images, 1.0, sampler=sampler, seed=5, verbose=0)
    np.testing.assert_allclose(full, generated, atol=1e-6)
    light = vp_model.img2img(images, 0.25, sampler=sampler, seed=5, verbose=0)
    heavy = vp_model.img2img(images, 0.75, sampler=sampler, seed=5, verbose=0)
    assert np.abs(light - images).mean() < np.abs(heavy - images).mean()
    # The same seed, the same result; another seed, another.
    again = vp_model.inpaint(images, _bottom_half(), sampler=sampler, seed=5, verbose=0)
    np.testing.assert_array_equal(again, half)
    other = vp_model.inpaint(images, _bottom_half(), sampler=sampler, seed=6, verbose=0)
    assert np.abs(other - half).max() > 1e-3


def test_img2img_starts_int_steps_times_strength_from_the_end(vp_model, monkeypatch):
    seen = []
    calls = vp_model.denoise

    def count(*args, **kwargs):
        seen.append(1)
        return calls(*args, **kwargs)

    monkeypatch.setattr(vp_model, "denoise", count)
    vp_model.sampling_state.functions.clear()
    vp_model.img2img(_images(), 0.39, sampler=DDIMSampler(10), seed=0, verbose=0)
    # A traced loop calls the denoiser once; its tables hold the steps left.
    (run,) = vp_model.sampling_state.functions.values()
    assert [key for key in vp_model.sampling_state.functions][0][-1] == ("img2img", 7)
    assert run is not None and seen


def test_img2img_says_when_a_strength_rounds_to_another_ones_steps(vp_model):
    # A 2-step sampler: 0-0.49 would return the input, 0.5-0.99 one image.
    images, two = _images(), DDIMSampler(2)
    with pytest.warns(UserWarning, match=r"no step .*strength=0\.3 returns"):
        np.testing.assert_array_equal(
            vp_model.img2img(images, 0.3, sampler=two), images
        )
    with pytest.warns(UserWarning, match=r"1 of the sampler's 2 .*strength=0\.7"):
        rounded = vp_model.img2img(images, 0.7, sampler=two, seed=0, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        half = vp_model.img2img(images, 0.5, sampler=two, seed=0, verbose=0)
        warn_if_rounded(0.33, 50)  # DDIM-50's strengths are 0.02 apart
    np.testing.assert_array_equal(rounded, half)


@pytest.mark.parametrize(
    "schedule, sampler",
    [
        (EDMSchedule(), HeunSampler(4)),
        (EDMSchedule(), DPMSolverSampler(5)),
        (FlowMatchSchedule(shift=2.0), EulerSampler(5)),
        (FlowMatchSchedule(), DPMSolverSampler(5)),
        (NoiseSchedule(100), RePaintSampler(6, 2, 2)),
    ],
)
def test_every_schedule_keeps_the_region_and_edits(schedule, sampler):
    model = DiffusionModel(tiny_unet(widths=ONE_LEVEL), schedule, seed=1)
    images = _images()
    filled = model.inpaint(images, _bottom_half(), sampler=sampler, seed=2, verbose=0)
    np.testing.assert_array_equal(filled[:, :4], images[:, :4])
    assert np.isfinite(filled).all()
    if not isinstance(sampler, RePaintSampler):
        edited = model.img2img(images, 0.5, sampler=sampler, seed=2, verbose=0)
        assert edited.shape == images.shape and np.isfinite(edited).all()


def test_guided_edits_follow_the_labels(make_unet):
    unet = make_unet(num_classes=3, widths=ONE_LEVEL)
    rng = np.random.default_rng(0)
    for variable in unet.trainable_variables:  # the label embedding starts at 0
        noise = rng.normal(0.0, 0.05, variable.shape).astype("float32")
        variable.assign(variable.numpy() + noise)
    model = DiffusionModel(unet, NoiseSchedule(100, "cosine"), seed=0)
    images, sampler = _images(), DDIMSampler(6)
    plain = model.img2img(images, 0.8, labels=[0, 1, 2], sampler=sampler, seed=0)
    guided = model.img2img(
        images, 0.8, labels=[0, 1, 2], guidance_scale=3.0, sampler=sampler, seed=0
    )
    assert np.abs(guided - plain).max() > 1e-4
    filled = model.inpaint(
        images, _bottom_half(), labels=2, guidance_scale=2.0, sampler=sampler, seed=0
    )
    np.testing.assert_array_equal(filled[:, :4], images[:, :4])


class IdealGaussianDenoiser(keras.Model):
    """E[eps | x_t] for data N(0, cov) of two pixels, images of shape (1, 2, 1):
    sqrt(1 - abar) (abar cov + (1 - abar) I)^-1 x_t."""

    def __init__(self, cov, abar, **kwargs):
        super().__init__(**kwargs)
        eye = np.eye(2)
        tables = [np.sqrt(1 - a) * np.linalg.inv(a * cov + (1 - a) * eye) for a in abar]
        self.tables = tf.constant(np.asarray(tables, np.float32))

    def call(self, inputs):
        x, t = inputs[0], inputs[1]
        table = tf.gather(self.tables, tf.cast(tf.round(t), tf.int32))
        return tf.reshape(tf.matmul(table, tf.reshape(x, (-1, 2, 1))), tf.shape(x))


def test_inpainting_gaussian_data_reaches_its_conditional_mean():
    # Pixels of std 0.5 and correlation 0.8: given the kept one at 0.6, the
    # filled one has mean 0.8 * 0.6 = 0.48 and std 0.5 sqrt(1 - 0.64) = 0.3.
    rho, std, kept = 0.8, 0.5, 0.6
    cov = std**2 * np.array([[1.0, rho], [rho, 1.0]])
    schedule = NoiseSchedule(1000, "cosine")
    denoiser = IdealGaussianDenoiser(cov, schedule.alphas_cumprod_float64)
    model = DiffusionModel(denoiser, schedule, image_shape=(1, 2, 1), ema_decay=None)
    n = 1000
    images = np.zeros((n, 1, 2, 1), "float32")
    images[:, 0, 0] = kept
    mask = np.array([[0.0, 1.0]])

    def filled(sampler):
        return model.inpaint(images, mask, sampler=sampler, seed=2, verbose=0)[
            :, 0, 1, 0
        ]

    # Measured (n = 4,000): the replacement alone, DDIM-50, reaches a mean of
    # 0.21 (std 0.37); RePaint's resampling, 50 steps with 10 jumps of 5 at
    # eta 1, 0.43 (std 0.28): it moves most of the way to the answer.
    plain = filled(DDIMSampler(50))
    resampled = filled(RePaintSampler(50, jump_length=5, jump_n_sample=10, eta=1.0))
    se = 0.3 / np.sqrt(n)
    assert abs(resampled.mean() - rho * kept) < 0.07 + 4 * se, resampled.mean()
    assert abs(resampled.std() - std * np.sqrt(1 - rho**2)) < 0.05, resampled.std()
    assert abs(plain.mean() - rho * kept) > 2 * abs(resampled.mean() - rho * kept)


@pytest.mark.parametrize(
    "call, error, fragment",
    [
        (
            lambda m: m.inpaint(np.zeros((2, 8, 8, 3)), np.ones((8, 8))),
            ValueError,
            r"`images` must have shape \(n, 8, 8, 1\).*\(2, 8, 8, 3\)",
        ),
        (
            lambda m: m.inpaint(np.full(SHAPE, 2.0), np.ones((8, 8))),
            ValueError,
            r"`images` must hold finite values in \[-1, 1\].*\[2, 2\]",
        ),
        (
            lambda m: m.inpaint(_images(), np.ones((4, 4))),
            ValueError,
            r"`mask` must have shape.*\(4, 4\)",
        ),
        (
            lambda m: m.inpaint(_images(), np.full((8, 8), 1.5)),
            ValueError,
            r"`mask` must hold values in \[0, 1\].*1\.5",
        ),
        (lambda m: m.inpaint(_images(), "top"), TypeError, "mask='top'"),
        (lambda m: m.img2img(_images(), 1.2), ValueError, "strength=1.2"),
        (lambda m: m.img2img(_images(), -0.1), ValueError, "strength=-0.1"),
        (
            lambda m: m.img2img(_images(), 0.0, labels=[1, 2, 0]),
            ValueError,
            "unconditional: `labels` must be None",
        ),
        (
            lambda m: m.inpaint(_images(), np.ones((8, 8)), labels=1),
            ValueError,
            "unconditional: `labels` must be None",
        ),
        (
            lambda m: m.img2img(_images(), 0.5, sampler=RePaintSampler(4)),
            ValueError,
            r"RePaintSampler cannot start from a noised image.*strength=0.5",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_argument(vp_model, call, error, fragment):
    with pytest.raises(error, match=fragment):
        call(vp_model)
