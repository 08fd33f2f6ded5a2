"""UNet, DiffusionModel, its `fit` and `generate` refuse bad input with a
clear error (tests/refusal.py); a refused `fit` changes no state."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import DDIMSampler, DiffusionModel, NoiseSchedule, UNet
from tests import refusal
from tests.denoisers import tiny_unet
from tests.refusal import zeros

_MODELS = {}


class Context:
    """Lazily built models and data shared by the cases of one test."""

    def __init__(self):
        self.schedule = NoiseSchedule(10)
        self.images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1))
        self.images = self.images.astype("float32")

    def model(self, num_classes=None):
        # Shared across tests: a refused call leaves a model as it was.
        if num_classes not in _MODELS:
            model = DiffusionModel(
                tiny_unet(num_classes=num_classes), self.schedule, ema_decay=0.9, seed=0
            )
            model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
            _MODELS[num_classes] = model
        return _MODELS[num_classes]


UNET_CASES = [
    ("image_shape 2D", lambda c: tiny_unet((8, 8)), ValueError, ["image_shape=(8, 8)"]),
    ("image_shape int", lambda c: UNet(8), TypeError, ["image_shape=8"]),
    ("widths empty", lambda c: tiny_unet(widths=()), ValueError, ["widths", "()"]),
    ("widths int", lambda c: tiny_unet(widths=8), TypeError, ["widths=8"]),
    (
        "widths groups",
        lambda c: tiny_unet(widths=(4, 6), groups=4),
        ValueError,
        ["groups=4"],
    ),
    ("groups 0", lambda c: tiny_unet(groups=0), ValueError, ["groups=0"]),
    ("groups str", lambda c: tiny_unet(groups="2"), TypeError, ["groups='2'"]),
    ("num_heads 0", lambda c: tiny_unet(num_heads=0), ValueError, ["num_heads=0"]),
    ("dropout 1.5", lambda c: tiny_unet(dropout=1.5), ValueError, ["dropout=1.5"]),
    ("dropout str", lambda c: tiny_unet(dropout="a"), TypeError, ["dropout='a'"]),
    (
        "embedding_dim",
        lambda c: tiny_unet(embedding_dim=-3),
        ValueError,
        ["embedding_dim=-3"],
    ),
    (
        "num_res_blocks",
        lambda c: tiny_unet(num_res_blocks=0),
        ValueError,
        ["num_res_blocks=0"],
    ),
    (
        "cross_attention_dim with num_classes",
        lambda c: tiny_unet(num_classes=3, cross_attention_dim=6),
        ValueError,
        ["num_classes=3, cross_attention_dim=6"],
    ),
    (
        "cross_attention_dim with more heads than channels",
        lambda c: tiny_unet(
            cross_attention_dim=6,
            widths=(4, 8),
            attention_levels=(True, False),
            num_heads=8,
        ),
        ValueError,
        ["widths=(4, 8), num_heads=8"],
    ),
    (
        "cross_attention_dim 0",
        lambda c: tiny_unet(cross_attention_dim=0),
        ValueError,
        ["cross_attention_dim=0"],
    ),
    (
        "cross_attention_dim with mid_attention_groups",
        lambda c: tiny_unet(cross_attention_dim=6, mid_attention_groups=2),
        ValueError,
        ["mid_attention_groups=2, cross_attention_dim=6"],
    ),
    (
        "num_classes 0",
        lambda c: tiny_unet(num_classes=0),
        ValueError,
        ["num_classes=0"],
    ),
    (
        "num_classes str",
        lambda c: tiny_unet(num_classes="3"),
        TypeError,
        ["num_classes='3'"],
    ),
    (
        "attention_levels",
        lambda c: tiny_unet(widths=(4, 8), attention_levels=(True,)),
        ValueError,
        ["attention_levels=(True,)"],
    ),
    (
        "size not divisible",
        lambda c: tiny_unet((6, 6, 1), widths=(4, 8, 8)),
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
        lambda c: DiffusionModel(tiny_unet(), "linear"),
        TypeError,
        ["schedule='linear'"],
    ),
    (
        "unknown prediction type",
        lambda c: DiffusionModel(tiny_unet(), prediction_type="eps"),
        ValueError,
        ["prediction_type='eps'"],
    ),
    (
        "loss_weighting",
        lambda c: DiffusionModel(tiny_unet(), loss_weighting="snr"),
        ValueError,
        ["loss_weighting='snr'"],
    ),
    (
        "ema_decay",
        lambda c: DiffusionModel(tiny_unet(), ema_decay=1.0),
        ValueError,
        ["ema_decay=1.0"],
    ),
    (
        # The same error type as UNet's.
        "num_classes str",
        lambda c: DiffusionModel(tiny_unet(), num_classes="3"),
        TypeError,
        ["num_classes='3'"],
    ),
    (
        "min_snr_gamma 0",
        lambda c: DiffusionModel(tiny_unet(), min_snr_gamma=0.0),
        ValueError,
        ["min_snr_gamma=0.0", "greater than 0"],
    ),
    (
        "num_classes on an unconditional denoiser",
        lambda c: DiffusionModel(tiny_unet(), num_classes=3),
        ValueError,
        ["num_classes=3"],
    ),
    (
        "num_classes other than the denoiser's",
        lambda c: DiffusionModel(tiny_unet(num_classes=3), num_classes=5),
        ValueError,
        ["num_classes=5", "num_classes=3"],
    ),
    (
        "class_dropout unconditional",
        lambda c: DiffusionModel(tiny_unet(), class_dropout=0.1),
        ValueError,
        ["class_dropout=0.1"],
    ),
    (
        "image_shape mismatch",
        lambda c: DiffusionModel(tiny_unet(), image_shape=(16, 16, 1)),
        ValueError,
        ["(16, 16, 1)", "(8, 8, 1)"],
    ),
    (
        "image_shape str",
        lambda c: DiffusionModel(tiny_unet(), image_shape="abc"),
        ValueError,
        ["image_shape='abc'"],
    ),
    (
        "compile with a loss",
        lambda c: DiffusionModel(tiny_unet()).compile(loss="mse"),
        ValueError,
        ["loss='mse'"],
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

MODEL_ARGUMENT_CASES = [
    (
        "ema_warmup not bool",
        lambda c: DiffusionModel(tiny_unet(), ema_warmup="no"),
        TypeError,
        ["ema_warmup='no'"],
    ),
    ("generate seed str", _generate(seed="abc"), TypeError, ["seed='abc'"]),
    ("generate seed float", _generate(seed=1.5), TypeError, ["seed=1.5"]),
]


@pytest.mark.parametrize(
    "call, error, fragments",
    refusal.params(UNET_CASES + MODEL_CASES + GENERATE_CASES + MODEL_ARGUMENT_CASES),
)
def test_bad_input_is_refused_with_a_clear_message(call, error, fragments):
    refusal.assert_refused_twice(lambda: call(Context()), error, fragments)


def _dataset(elements):
    return tf.data.Dataset.from_tensor_slices(elements)


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
        lambda c: (zeros((4, 16, 16, 1)), None),
        ValueError,
        ["shape (4, 16, 16, 1)"],
    ),
    (
        "channel mismatch",
        None,
        lambda c: (zeros((4, 8, 8, 3)), None),
        ValueError,
        ["shape (4, 8, 8, 3)"],
    ),
    (
        "no batch axis",
        None,
        lambda c: (zeros((8, 8, 1)), None),
        ValueError,
        ["shape (8, 8, 1)"],
    ),
    (
        "empty array",
        None,
        lambda c: (zeros((0, 8, 8, 1)), None),
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
        lambda c: (
            tf.data.Dataset.from_tensor_slices(zeros((0, 8, 8, 1))).batch(2),
            None,
        ),
        ValueError,
        ["empty", "0 batches"],
    ),
    (
        "integer dataset",
        None,
        lambda c: (
            tf.data.Dataset.from_tensor_slices(zeros((4, 8, 8, 1), "uint8")),
            None,
        ),
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
            _dataset((c.images, np.zeros(8, "int32"))),
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


def _state(model):
    return (
        [v.numpy().copy() for v in model.weights],
        int(model.optimizer.iterations),
        model.seed_generator.state.numpy().copy(),
    )


def test_refused_fit_changes_no_state():
    """Every bad `fit` is refused before a weight, step or seed moves."""
    context = Context()
    for case_id, num_classes, make, error, fragments in FIT_CASES:
        model = context.model(num_classes)
        before = _state(model)
        x, y = make(context)
        try:
            refusal.assert_refused(
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
