"""Bad input across the public API: a clear error before any state changes.

Each case is `(id, call, error, fragments)`: `call(ctx)` must raise `error`
(`ValueError` or `TypeError`) whose message contains every fragment, which
names the argument and echoes the received value. Calls that would change a
model (`fit`) also check that its weights, optimizer step and random stream
are untouched.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import (
    DDIMSampler,
    DDPMSampler,
    DiffusionModel,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    NoiseSchedule,
    UNet,
    metrics,
)
from keras_diffusion import data as kd_data

SAMPLERS = (DDPMSampler, DDIMSampler, DPMSolverSampler, EulerSampler, HeunSampler)
TINY = dict(widths=(4, 8), num_res_blocks=1, groups=2, embedding_dim=16)


def unet(image_shape=(8, 8, 1), **kwargs):
    return UNet(image_shape, **{**TINY, **kwargs})


_MODELS = {}


class Context:
    """Lazily built models and data shared by the cases of one test."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.schedule = NoiseSchedule(10)
        self.images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1))
        self.images = self.images.astype("float32")

    def model(self, num_classes=None):
        # Shared across tests: a refused call leaves a model as it was.
        if num_classes not in _MODELS:
            model = DiffusionModel(
                unet(num_classes=num_classes), self.schedule, ema_decay=0.9, seed=0
            )
            model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
            _MODELS[num_classes] = model
        return _MODELS[num_classes]

    def sample(self, sampler, x_T=None, prediction_type="epsilon", **kwargs):
        x_T = np.zeros((2, 4), "float32") if x_T is None else x_T
        return sampler.sample(
            lambda x, t: 0.5 * x, x_T, self.schedule, prediction_type, **kwargs
        )

    def empty_folder(self):
        folder = self.tmp_path / "empty"
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text("no images here")
        return str(folder)


def _x(shape, dtype="float32", value=0.0):
    return np.full(shape, value, dtype)


SCHEDULE_CASES = [
    ("T<2", lambda c: NoiseSchedule(1), ValueError, ["num_train_timesteps=1"]),
    ("T float", lambda c: NoiseSchedule(10.0), TypeError, ["num_train_timesteps=10.0"]),
    ("T str", lambda c: NoiseSchedule("10"), TypeError, ["num_train_timesteps='10'"]),
    (
        "unknown schedule",
        lambda c: NoiseSchedule(10, "quadratic"),
        ValueError,
        ["beta_schedule='quadratic'"],
    ),
    (
        "schedule not a str",
        lambda c: NoiseSchedule(10, np.array([1, 2])),
        ValueError,
        ["beta_schedule=array([1, 2])"],
    ),
    (
        "beta_start 0",
        lambda c: NoiseSchedule(10, beta_start=0.0),
        ValueError,
        ["beta_start=0.0"],
    ),
    (
        "beta_end 1",
        lambda c: NoiseSchedule(10, beta_end=1.0),
        ValueError,
        ["beta_end=1.0"],
    ),
    (
        "beta negative",
        lambda c: NoiseSchedule(10, beta_start=-0.1),
        ValueError,
        ["beta_start=-0.1"],
    ),
    (
        "beta nan",
        lambda c: NoiseSchedule(10, beta_end=float("nan")),
        ValueError,
        ["beta_end=nan"],
    ),
    (
        "beta str",
        lambda c: NoiseSchedule(10, beta_end="0.02"),
        TypeError,
        ["beta_end='0.02'"],
    ),
    (
        "betas reversed",
        lambda c: NoiseSchedule(10, beta_start=0.2, beta_end=0.1),
        ValueError,
        ["beta_start=0.2", "beta_end=0.1"],
    ),
    (
        "rescale not bool",
        lambda c: NoiseSchedule(10, rescale_zero_terminal_snr="yes"),
        TypeError,
        ["rescale_zero_terminal_snr='yes'"],
    ),
    (
        "trained_betas length",
        lambda c: NoiseSchedule(3, trained_betas=[0.1, 0.2]),
        ValueError,
        ["trained_betas", "(2,)"],
    ),
    (
        "trained_betas range",
        lambda c: NoiseSchedule(3, trained_betas=[0.1, 0.2, 1.0]),
        ValueError,
        ["trained_betas", "max=1.0"],
    ),
    (
        "trained_betas str",
        lambda c: NoiseSchedule(3, trained_betas="abc"),
        TypeError,
        ["trained_betas='abc'"],
    ),
    (
        "add_noise integer images",
        lambda c: c.schedule.add_noise(
            _x((2, 4), "int32"), _x((2, 4)), np.array([0, 1])
        ),
        TypeError,
        ["x0", "int32"],
    ),
    (
        "add_noise t >= T",
        lambda c: c.schedule.add_noise(_x((2, 4)), _x((2, 4)), np.array([0, 10])),
        ValueError,
        ["`t`", "[0, 10]"],
    ),
    (
        "add_noise t < 0",
        lambda c: c.schedule.add_noise(_x((2, 4)), _x((2, 4)), np.array([-1, 1])),
        ValueError,
        ["`t`", "[-1, 1]"],
    ),
    (
        "add_noise noise shape",
        lambda c: c.schedule.add_noise(_x((2, 4)), _x((2, 5)), np.array([0, 1])),
        ValueError,
        ["noise.shape=(2, 5)"],
    ),
    (
        "add_noise t per example",
        lambda c: c.schedule.velocity(_x((2, 4)), _x((2, 4)), np.array([0, 1, 2])),
        ValueError,
        ["`t`", "(3,)"],
    ),
    (
        "snr t float out of range",
        lambda c: c.schedule.snr(np.array([9.5], "float32")),
        ValueError,
        ["`t`", "9.5"],
    ),
]


def _sampler_cases():
    cases = []
    for cls in SAMPLERS:
        name = cls.__name__
        cases += [
            (
                f"{name} num_steps 0",
                lambda c, cls=cls: cls(num_steps=0),
                ValueError,
                ["num_steps=0"],
            ),
            (
                f"{name} num_steps str",
                lambda c, cls=cls: cls(num_steps="5"),
                TypeError,
                ["num_steps='5'"],
            ),
            (
                f"{name} num_steps > T",
                lambda c, cls=cls: c.sample(cls(num_steps=11)),
                ValueError,
                ["num_steps=11", "num_train_timesteps=10"],
            ),
            (
                f"{name} spacing",
                lambda c, cls=cls: cls(timestep_spacing="middle"),
                ValueError,
                ["timestep_spacing='middle'"],
            ),
            (
                f"{name} prediction type",
                lambda c, cls=cls: c.sample(cls(num_steps=2), prediction_type="eps"),
                ValueError,
                ["prediction_type='eps'"],
            ),
            (
                f"{name} integer noise",
                lambda c, cls=cls: c.sample(cls(num_steps=2), _x((2, 4), "int32")),
                TypeError,
                ["x_T", "int32"],
            ),
        ]
    return cases


SAMPLER_CASES = _sampler_cases() + [
    ("negative eta", lambda c: DDIMSampler(eta=-0.5), ValueError, ["eta=-0.5"]),
    ("eta nan", lambda c: DDIMSampler(eta=float("nan")), ValueError, ["eta=nan"]),
    ("eta str", lambda c: DDIMSampler(eta="0"), TypeError, ["eta='0'"]),
    (
        "clip range",
        lambda c: DDIMSampler(clip_sample_range=0.0),
        ValueError,
        ["clip_sample_range=0.0"],
    ),
    (
        "steps_offset beyond T",
        lambda c: c.sample(DDIMSampler(num_steps=5, steps_offset=9)),
        ValueError,
        ["steps_offset=9"],
    ),
    (
        # n + 1 "linspace" points on T = n timesteps repeat a noise level.
        "DPM-Solver steps = T with linspace spacing",
        lambda c: c.sample(DPMSolverSampler(num_steps=10)),
        ValueError,
        ["num_steps=10", "timestep_spacing='linspace'"],
    ),
    (
        "final_sigmas_type",
        lambda c: DPMSolverSampler(final_sigmas_type="one"),
        ValueError,
        ["final_sigmas_type='one'"],
    ),
    (
        "schedule not a schedule",
        lambda c: DDIMSampler(2).sample(lambda x, t: x, _x((1, 4)), "linear"),
        TypeError,
        ["schedule='linear'"],
    ),
    (
        "denoise_fn not callable",
        lambda c: DDIMSampler(2).sample(3, _x((1, 4)), c.schedule),
        TypeError,
        ["denoise_fn", "3"],
    ),
    (
        "noise of no batch",
        lambda c: c.sample(DDIMSampler(2), np.float32(0.0)),
        ValueError,
        ["x_T", "shape ()"],
    ),
    (
        "noise of strings",
        lambda c: c.sample(DDIMSampler(2), np.array(["a", "b"])),
        TypeError,
        ["x_T", "string"],
    ),
    (
        "seed str",
        lambda c: c.sample(DDPMSampler(2), seed="a"),
        TypeError,
        ["seed='a'"],
    ),
    (
        # By design: x0 is undefined where alphas_cumprod is 0.
        "epsilon on zero terminal SNR",
        lambda c: DDIMSampler(2, timestep_spacing="trailing").sample(
            lambda x, t: x,
            _x((1, 4)),
            NoiseSchedule(10, rescale_zero_terminal_snr=True),
        ),
        ValueError,
        ["prediction_type='epsilon'"],
    ),
]

UNET_CASES = [
    ("image_shape 2D", lambda c: unet((8, 8)), ValueError, ["image_shape=(8, 8)"]),
    ("image_shape int", lambda c: UNet(8), TypeError, ["image_shape=8"]),
    ("widths empty", lambda c: unet(widths=()), ValueError, ["widths", "()"]),
    ("widths int", lambda c: unet(widths=8), TypeError, ["widths=8"]),
    (
        "widths groups",
        lambda c: unet(widths=(4, 6), groups=4),
        ValueError,
        ["groups=4"],
    ),
    ("groups 0", lambda c: unet(groups=0), ValueError, ["groups=0"]),
    ("groups str", lambda c: unet(groups="2"), TypeError, ["groups='2'"]),
    ("num_heads 0", lambda c: unet(num_heads=0), ValueError, ["num_heads=0"]),
    ("dropout 1.5", lambda c: unet(dropout=1.5), ValueError, ["dropout=1.5"]),
    ("dropout str", lambda c: unet(dropout="a"), TypeError, ["dropout='a'"]),
    (
        "embedding_dim",
        lambda c: unet(embedding_dim=-3),
        ValueError,
        ["embedding_dim=-3"],
    ),
    (
        "num_res_blocks",
        lambda c: unet(num_res_blocks=0),
        ValueError,
        ["num_res_blocks=0"],
    ),
    ("num_classes 0", lambda c: unet(num_classes=0), ValueError, ["num_classes=0"]),
    (
        "num_classes str",
        lambda c: unet(num_classes="3"),
        TypeError,
        ["num_classes='3'"],
    ),
    (
        "attention_levels",
        lambda c: unet(attention_levels=(True,)),
        ValueError,
        ["attention_levels=(True,)"],
    ),
    (
        "size not divisible",
        lambda c: unet((6, 6, 1), widths=(4, 8, 8)),
        ValueError,
        ["image_shape=(6, 6, 1)"],
    ),
]

MODEL_CASES = [
    (
        "denoiser not a model",
        lambda c: DiffusionModel("unet"),
        TypeError,
        ["denoiser='unet'"],
    ),
    (
        "schedule not a schedule",
        lambda c: DiffusionModel(unet(), "linear"),
        TypeError,
        ["schedule='linear'"],
    ),
    (
        "unknown prediction type",
        lambda c: DiffusionModel(unet(), prediction_type="eps"),
        ValueError,
        ["prediction_type='eps'"],
    ),
    (
        "loss_weighting",
        lambda c: DiffusionModel(unet(), loss_weighting="snr"),
        ValueError,
        ["loss_weighting='snr'"],
    ),
    (
        "ema_decay",
        lambda c: DiffusionModel(unet(), ema_decay=1.0),
        ValueError,
        ["ema_decay=1.0"],
    ),
    (
        # The same error type as UNet's.
        "num_classes str",
        lambda c: DiffusionModel(unet(), num_classes="3"),
        TypeError,
        ["num_classes='3'"],
    ),
    (
        "min_snr_gamma 0",
        lambda c: DiffusionModel(unet(), min_snr_gamma=0.0),
        ValueError,
        ["min_snr_gamma=0.0", "greater than 0"],
    ),
    (
        "num_classes on an unconditional denoiser",
        lambda c: DiffusionModel(unet(), num_classes=3),
        ValueError,
        ["num_classes=3"],
    ),
    (
        "num_classes other than the denoiser's",
        lambda c: DiffusionModel(unet(num_classes=3), num_classes=5),
        ValueError,
        ["num_classes=5", "num_classes=3"],
    ),
    (
        "class_dropout unconditional",
        lambda c: DiffusionModel(unet(), class_dropout=0.1),
        ValueError,
        ["class_dropout=0.1"],
    ),
    (
        "image_shape mismatch",
        lambda c: DiffusionModel(unet(), image_shape=(16, 16, 1)),
        ValueError,
        ["(16, 16, 1)", "(8, 8, 1)"],
    ),
    (
        "image_shape str",
        lambda c: DiffusionModel(unet(), image_shape="abc"),
        ValueError,
        ["image_shape='abc'"],
    ),
    (
        "compile with a loss",
        lambda c: DiffusionModel(unet()).compile(loss="mse"),
        ValueError,
        ["loss='mse'"],
    ),
]

# `fit` cases: (id, model num_classes, make (x, y), error, fragments).
FIT_CASES = [
    (
        "integer images",
        None,
        lambda c: ((c.images * 127 + 128).astype("uint8"), None),
        TypeError,
        ["images", "uint8"],
    ),
    (
        "images outside [-1, 1]",
        None,
        lambda c: (c.images * 100, None),
        ValueError,
        ["[-1, 1]", "values in [-9"],
    ),
    (
        "image size mismatch",
        None,
        lambda c: (_x((4, 16, 16, 1)), None),
        ValueError,
        ["shape (4, 16, 16, 1)"],
    ),
    (
        "channel mismatch",
        None,
        lambda c: (_x((4, 8, 8, 3)), None),
        ValueError,
        ["shape (4, 8, 8, 3)"],
    ),
    (
        "no batch axis",
        None,
        lambda c: (_x((8, 8, 1)), None),
        ValueError,
        ["shape (8, 8, 1)"],
    ),
    (
        "empty array",
        None,
        lambda c: (_x((0, 8, 8, 1)), None),
        ValueError,
        ["empty", "0 examples"],
    ),
    (
        "tensor outside [-1, 1]",
        None,
        lambda c: (tf.constant(c.images * 100), None),
        ValueError,
        ["[-1, 1]", "values in [-9"],
    ),
    (
        "empty dataset",
        None,
        lambda c: (tf.data.Dataset.from_tensor_slices(_x((0, 8, 8, 1))).batch(2), None),
        ValueError,
        ["empty", "0 batches"],
    ),
    (
        "integer dataset",
        None,
        lambda c: (tf.data.Dataset.from_tensor_slices(_x((4, 8, 8, 1), "uint8")), None),
        TypeError,
        ["images", "uint8"],
    ),
    (
        "labels for an unconditional model",
        None,
        lambda c: (c.images, np.zeros(8, "int32")),
        ValueError,
        ["unconditional", "labels of shape (8,)"],
    ),
    (
        "labelled dataset for an unconditional model",
        None,
        lambda c: (
            tf.data.Dataset.from_tensor_slices((c.images, np.zeros(8, "int32"))),
            None,
        ),
        ValueError,
        ["unconditional", "labels of shape"],
    ),
    (
        "no labels for a conditional model",
        3,
        lambda c: (c.images, None),
        ValueError,
        ["conditional", "images only, of shape (8, 8, 8, 1)"],
    ),
    (
        "labels out of range",
        3,
        lambda c: (c.images, np.arange(8) % 4),
        ValueError,
        ["[0, 3)", "labels in [0, 3]"],
    ),
    (
        "negative labels",
        3,
        lambda c: (c.images, np.arange(8) % 3 - 1),
        ValueError,
        ["[0, 3)", "labels in [-1, 1]"],
    ),
    (
        "float labels",
        3,
        lambda c: (c.images, np.zeros(8, "float32")),
        TypeError,
        ["labels", "float32"],
    ),
    (
        "labels per image",
        3,
        lambda c: (c.images, np.zeros(5, "int32")),
        ValueError,
        ["labels of shape (5,)"],
    ),
]


def _generate(num_classes=None, num_images=2, **kwargs):
    return lambda c: c.model(num_classes).generate(num_images, **kwargs)


GENERATE_CASES = [
    ("num_images 0", _generate(num_images=0), ValueError, ["num_images=0"]),
    ("num_images str", _generate(num_images="2"), TypeError, ["num_images='2'"]),
    ("labels unconditional", _generate(labels=1), ValueError, ["labels=1"]),
    (
        "guidance unconditional",
        _generate(guidance_scale=3.0),
        ValueError,
        ["guidance_scale=3.0"],
    ),
    (
        "guidance of the null class",
        _generate(3, labels="unconditional", guidance_scale=3.0),
        ValueError,
        ["labels='unconditional'", "guidance_scale=3.0"],
    ),
    (
        "labels an unknown word",
        _generate(3, labels="all"),
        ValueError,
        ["labels='all'"],
    ),
    (
        "guidance nan",
        _generate(3, labels=0, guidance_scale=float("nan")),
        ValueError,
        ["guidance_scale=nan"],
    ),
    (
        "labels out of range",
        _generate(3, labels=[0, 3]),
        ValueError,
        ["[0, 3)", "labels in [0, 3]"],
    ),
    (
        "labels count",
        _generate(3, labels=[0, 1, 2]),
        ValueError,
        ["num_images=2", "shape (3,)"],
    ),
    ("float labels", _generate(3, labels=[0.5, 1.0]), TypeError, ["labels=[0.5, 1.0]"]),
    ("batch_size 0", _generate(batch_size=0), ValueError, ["batch_size=0"]),
    (
        "sampler name unknown",
        _generate(sampler="unknown"),
        ValueError,
        ["sampler='unknown'", "'ddim'"],
    ),
    ("sampler int", _generate(sampler=3), TypeError, ["sampler=3"]),
    (
        "sampler steps > T",
        _generate(sampler=DDIMSampler(num_steps=50)),
        ValueError,
        ["num_steps=50"],
    ),
]

DATA_CASES = [
    (
        "boolean images",
        lambda c: kd_data.from_arrays(np.zeros((4, 8, 8), bool)),
        TypeError,
        ["images", "dtype=bool"],
    ),
    (
        "empty images",
        lambda c: kd_data.from_arrays(np.zeros((0, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(0, 8, 8)"],
    ),
    (
        "images of rank 2",
        lambda c: kd_data.from_arrays(np.zeros((8, 8), "uint8")),
        ValueError,
        ["images", "shape=(8, 8)"],
    ),
    (
        "channels first",
        lambda c: kd_data.from_arrays(np.zeros((4, 3, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(4, 3, 8, 8)"],
    ),
    (
        "ragged images",
        lambda c: kd_data.from_arrays([[1, 2], [3]]),
        ValueError,
        ["images", "list"],
    ),
    (
        "float images out of range",
        lambda c: kd_data.from_arrays(np.full((4, 8, 8), 7.0)),
        ValueError,
        ["value_range=None", "max=7"],
    ),
    (
        "value_range too narrow",
        lambda c: kd_data.from_arrays(np.full((4, 8, 8), 7.0), value_range=(0, 1)),
        ValueError,
        ["value_range=(0.0, 1.0)"],
    ),
    (
        "batch_size 0",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), batch_size=0),
        ValueError,
        ["batch_size=0"],
    ),
    (
        "batch_size float",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), batch_size=2.0),
        TypeError,
        ["batch_size=2.0"],
    ),
    (
        "negative labels",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), labels=[-1, 0, 0, 0]),
        ValueError,
        ["labels", "min=-1"],
    ),
    (
        "labels count",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), labels=[0, 1]),
        ValueError,
        ["labels", "shape=(2,)"],
    ),
    (
        "shuffle str",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), shuffle="yes"),
        TypeError,
        ["shuffle='yes'"],
    ),
    (
        "shuffle_buffer_size 0",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), shuffle_buffer_size=0),
        ValueError,
        ["shuffle_buffer_size=0"],
    ),
    (
        "image_size 0",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), image_size=0),
        ValueError,
        ["image_size=0"],
    ),
    (
        "seed str",
        lambda c: kd_data.from_arrays(_x((4, 8, 8)), seed="1"),
        TypeError,
        ["seed='1'"],
    ),
    (
        "missing folder",
        lambda c: kd_data.from_directory(str(c.tmp_path / "nope"), 4, 8),
        ValueError,
        ["folder=", "nope"],
    ),
    (
        "folder without images",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8),
        ValueError,
        ["folder=", "empty"],
    ),
    (
        "folder path int",
        lambda c: kd_data.from_directory(3, 4, 8),
        TypeError,
        ["folder=3"],
    ),
    (
        "folder channels",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, channels=2),
        ValueError,
        ["channels=2"],
    ),
    (
        "folder background",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, background="0,0"),
        ValueError,
        ["background='0,0'"],
    ),
    (
        "folder resize",
        lambda c: kd_data.from_directory(c.empty_folder(), 4, 8, resize="fill"),
        ValueError,
        ["resize='fill'"],
    ),
    (
        "unknown preset",
        lambda c: kd_data.get_preset("imagenet"),
        ValueError,
        ["name='imagenet'"],
    ),
    (
        "preset name list",
        lambda c: kd_data.get_preset(["digits"]),
        ValueError,
        ["name=['digits']"],
    ),
    (
        "unknown dataset",
        lambda c: kd_data.make_dataset("imagenet"),
        ValueError,
        ["name='imagenet'"],
    ),
    (
        "folder without data_dir",
        lambda c: kd_data.make_dataset("folder"),
        ValueError,
        ["data_dir=None"],
    ),
    (
        "preset channels",
        lambda c: kd_data.make_dataset("digits", channels=3),
        ValueError,
        ["channels=3"],
    ),
    (
        "unknown keras dataset",
        lambda c: kd_data.from_keras_dataset("svhn"),
        ValueError,
        ["name='svhn'"],
    ),
    (
        "PyDataset empty",
        lambda c: kd_data.ArrayPyDataset(np.zeros((0, 8, 8), "uint8")),
        ValueError,
        ["images", "shape=(0, 8, 8)"],
    ),
    (
        "PyDataset flip str",
        lambda c: kd_data.ArrayPyDataset(_x((4, 8, 8)), flip="no"),
        TypeError,
        ["flip='no'"],
    ),
]

METRIC_CASES = [
    (
        "unknown feature extractor",
        lambda c: metrics.FrechetDistance(feature_extractor="clip"),
        ValueError,
        ["feature_extractor='clip'"],
    ),
    (
        "num_features 0",
        lambda c: metrics.FrechetDistance(feature_extractor=None, num_features=0),
        ValueError,
        ["num_features=0"],
    ),
    (
        "missing statistics file",
        lambda c: metrics.FrechetDistance(
            feature_extractor=None, num_features=2, real_statistics="/no/such.npz"
        ),
        ValueError,
        ["/no/such.npz"],
    ),
    (
        "missing weights file",
        lambda c: metrics.FrechetDistance(weights="/no/such.h5"),
        ValueError,
        ["weights='/no/such.h5'"],
    ),
    (
        "feature count mismatch",
        lambda c: metrics.frechet_distance([0.0], [[1.0]], [0.0, 1.0], np.eye(2)),
        ValueError,
        ["mu1.shape=(1,)", "mu2.shape=(2,)"],
    ),
    (
        "mean of strings",
        lambda c: metrics.frechet_distance("a", [[1.0]], [0.0], [[1.0]]),
        TypeError,
        ["mu1='a'"],
    ),
    (
        "KID subset larger than the sets",
        lambda c: metrics.kernel_distance(np.zeros((3, 2)), np.zeros((3, 2)), 1, 5),
        ValueError,
        ["subset_size=5"],
    ),
    (
        "KID features 1D",
        lambda c: metrics.kernel_distance(np.zeros(3), np.zeros((3, 2))),
        ValueError,
        ["real_features.shape=(3,)"],
    ),
    (
        "KID seed str",
        lambda c: metrics.KernelDistance(
            feature_extractor=None, num_features=2, seed="a"
        ),
        TypeError,
        ["seed='a'"],
    ),
    (
        "update with nothing",
        lambda c: metrics.FrechetDistance(
            feature_extractor=None, num_features=2
        ).update_state(),
        ValueError,
        ["real_images=None", "generated_images=None"],
    ),
    (
        "images of other size than the features",
        lambda c: metrics.FrechetDistance(
            feature_extractor=None, num_features=2
        ).update_state(np.zeros((3, 3))),
        ValueError,
        ["real_images.shape=(3, 3)"],
    ),
]

CASES = (
    SCHEDULE_CASES
    + SAMPLER_CASES
    + UNET_CASES
    + MODEL_CASES
    + GENERATE_CASES
    + DATA_CASES
    + METRIC_CASES
)


MODEL_ARGUMENT_CASES = [
    (
        "ema_warmup not bool",
        lambda c: DiffusionModel(unet(), ema_warmup="no"),
        TypeError,
        ["ema_warmup='no'"],
    ),
    ("generate seed str", _generate(seed="abc"), TypeError, ["seed='abc'"]),
    ("generate seed float", _generate(seed=1.5), TypeError, ["seed=1.5"]),
]


def _assert_refused(call, error, fragments):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for fragment in fragments:
        assert re.search(re.escape(fragment), message), (fragment, message)


@pytest.mark.parametrize(
    "call, error, fragments",
    [pytest.param(*case[1:], id=case[0]) for case in CASES + MODEL_ARGUMENT_CASES],
)
def test_bad_input_is_refused_with_a_clear_message(tmp_path, call, error, fragments):
    context = Context(tmp_path)
    # Twice: a refused call changes nothing, so it is refused alike again.
    for _ in range(2):
        _assert_refused(lambda: call(context), error, fragments)


def _state(model):
    return (
        [v.numpy().copy() for v in model.weights],
        int(model.optimizer.iterations),
        model.seed_generator.state.numpy().copy(),
    )


def test_refused_fit_changes_no_state(tmp_path):
    """Every bad `fit` is refused before a weight, step or seed moves."""
    context = Context(tmp_path)
    for case_id, num_classes, make, error, fragments in FIT_CASES:
        model = context.model(num_classes)
        before = _state(model)
        x, y = make(context)
        try:
            _assert_refused(
                lambda x=x, y=y, model=model: model.fit(
                    x, y, epochs=1, batch_size=4, verbose=0
                ),
                error,
                fragments,
            )
        except AssertionError as failure:
            raise AssertionError(f"case {case_id!r}: {failure}") from failure
        weights, step, seed = _state(model)
        assert step == before[1] == 0, case_id
        np.testing.assert_array_equal(seed, before[2], err_msg=case_id)
        for a, b in zip(weights, before[0], strict=True):
            np.testing.assert_array_equal(a, b, err_msg=case_id)
