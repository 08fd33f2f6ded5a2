"""Denoisers users bring: Functional, Sequential and subclassed models.

Each kind trains with `fit`, keeps an EMA of every trainable weight, samples
with that EMA, and round-trips through `.keras`. A subclassed model is
unbuilt until its first call; `DiffusionModel` builds it on a zero batch.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_diffusion import DDIMSampler, DiffusionModel, NoiseSchedule
from keras_diffusion.models import denoiser as denoiser_calls

IMAGE_SHAPE = (8, 8, 1)
SAMPLER = DDIMSampler(num_steps=4)


def _time_features(t, width):
    # A smooth function of t in [0, T): enough for a toy model to use it.
    t = ops.reshape(ops.cast(t, "float32") / 50.0, (-1, 1))
    return ops.concatenate([ops.sin(t * (k + 1)) for k in range(width)], axis=-1)


@keras.saving.register_keras_serializable(package="custom_denoiser_test")
class ListDenoiser(keras.Model):
    """The usual subclassed form: `call(self, inputs)` unpacks `[x_t, t(, y)]`."""

    def __init__(self, width=8, channels=1, num_classes=None, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.channels = channels
        self.num_classes = num_classes
        self.conv_in = keras.layers.Conv2D(width, 3, padding="same")
        self.time = keras.layers.Dense(width)
        self.conv_out = keras.layers.Conv2D(channels, 3, padding="same")
        self.label = (
            keras.layers.Embedding(num_classes + 1, width) if num_classes else None
        )

    def call(self, inputs, training=False):
        x, t = inputs[0], inputs[1]
        condition = self.time(_time_features(t, 4))
        if self.label is not None:
            condition = condition + self.label(inputs[2])
        h = ops.silu(self.conv_in(x) + condition[:, None, None, :])
        return self.conv_out(h)

    def get_config(self):
        return {
            **super().get_config(),
            "width": self.width,
            "channels": self.channels,
            "num_classes": self.num_classes,
        }


@keras.saving.register_keras_serializable(package="custom_denoiser_test")
class PositionalDenoiser(ListDenoiser):
    """The tutorial form: `call(self, x, t)`, two positional arguments."""

    def call(self, x, t):
        return super().call([x, t])


@keras.saving.register_keras_serializable(package="custom_denoiser_test")
class TimeChannel(keras.layers.Layer):
    """`[x_t, t]` -> `x_t` with a channel of t's features: a Sequential's head."""

    def call(self, inputs):
        x, t = inputs
        features = _time_features(t, 1)[:, None, None, :]
        return ops.concatenate([x, ops.zeros_like(x) + features], axis=-1)


def functional():
    x_in = keras.Input(IMAGE_SHAPE)
    t_in = keras.Input(())
    h = keras.layers.Conv2D(8, 3, padding="same", activation="silu")(
        TimeChannel()([x_in, t_in])
    )
    return keras.Model([x_in, t_in], keras.layers.Conv2D(1, 3, padding="same")(h))


def sequential():
    return keras.Sequential(
        [
            TimeChannel(),
            keras.layers.Conv2D(8, 3, padding="same", activation="silu"),
            keras.layers.Conv2D(1, 3, padding="same"),
        ]
    )


DENOISERS = {
    "functional": functional,
    "sequential": sequential,
    "subclassed": ListDenoiser,
    "subclassed_positional": PositionalDenoiser,
}


def _images(n=64, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:8, :8]
    centers = rng.integers(2, 6, size=(n, 2))
    blobs = np.exp(
        -((yy - centers[:, :1, None]) ** 2 + (xx - centers[:, 1:, None]) ** 2) / 3.0
    )
    return (2.0 * blobs - 1.0)[..., None].astype("float32")


def _model(denoiser, **kwargs):
    model = DiffusionModel(
        denoiser,
        NoiseSchedule(50, "cosine"),
        prediction_type="v_prediction",
        image_shape=IMAGE_SHAPE,
        ema_decay=0.9,
        seed=0,
        **kwargs,
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    return model


@pytest.mark.parametrize("kind", sorted(DENOISERS))
def test_denoiser_kind_trains_samples_with_ema_and_round_trips(kind, tmp_path):
    denoiser = DENOISERS[kind]()
    model = _model(denoiser)
    live = model.denoiser.trainable_variables
    # Built before the EMA: a shadow for every trainable weight, shape for shape.
    assert live and len(model.ema.shadows) == len(live)
    assert [s.shape for s in model.ema.shadows] == [v.shape for v in live]
    images = _images()
    loss_before = model.evaluate(images, batch_size=64, verbose=0)
    before = [v.numpy() for v in live]
    history = model.fit(images, batch_size=16, epochs=3, verbose=0)
    assert model.evaluate(images, batch_size=64, verbose=0) < loss_before
    assert np.isfinite(history.history["loss"]).all()
    assert all(not np.allclose(b, v.numpy()) for b, v in zip(before, live, strict=True))
    # The EMA trails the live weights, and `generate` samples with it.
    ema = model.generate(4, sampler=SAMPLER, seed=1, verbose=0)
    raw = model.generate(4, sampler=SAMPLER, seed=1, use_ema=False, verbose=0)
    assert not np.allclose(ema, raw)
    model.ema.copy_to(live)
    np.testing.assert_allclose(
        model.generate(4, sampler=SAMPLER, seed=1, verbose=0),
        model.generate(4, sampler=SAMPLER, seed=1, use_ema=False, verbose=0),
        atol=1e-6,
    )

    path = str(tmp_path / f"{kind}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.denoiser) is type(model.denoiser)
    np.testing.assert_allclose(
        loaded.generate(4, sampler=SAMPLER, seed=1, verbose=0),
        model.generate(4, sampler=SAMPLER, seed=1, verbose=0),
        atol=1e-6,
    )
    for a, b in zip(loaded.denoiser.weights, model.denoiser.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    loaded.fit(images, batch_size=16, epochs=1, verbose=0)
    assert int(loaded.optimizer.iterations.numpy()) == 4 * 4


def test_conditional_subclassed_denoiser_trains_and_guides(tmp_path):
    model = _model(ListDenoiser(num_classes=3), num_classes=3, class_dropout=0.2)
    # Three layers of kernel and bias, and the label embedding built too.
    assert len(model.ema.shadows) == len(model.denoiser.trainable_variables) == 7
    labels = np.arange(64) % 3
    model.fit(_images(), labels, batch_size=16, epochs=1, verbose=0)
    guided = model.generate(
        3, sampler=SAMPLER, labels=[0, 1, 2], guidance_scale=3.0, seed=0, verbose=0
    )
    path = str(tmp_path / "conditional.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        loaded.generate(
            3, sampler=SAMPLER, labels=[0, 1, 2], guidance_scale=3.0, seed=0, verbose=0
        ),
        guided,
        atol=1e-6,
    )


def test_call_form_is_read_from_the_signature():
    assert not denoiser_calls.takes_positional_inputs(functional())
    assert not denoiser_calls.takes_positional_inputs(sequential())
    assert not denoiser_calls.takes_positional_inputs(ListDenoiser())
    assert denoiser_calls.takes_positional_inputs(PositionalDenoiser())


def test_unbuilt_denoiser_needs_image_shape():
    with pytest.raises(ValueError, match="image_shape=None"):
        DiffusionModel(ListDenoiser())


def test_a_denoiser_that_fails_on_its_first_call_is_named_with_the_call():
    # Labels it cannot take: the build call shows what it was called with.
    with pytest.raises(ValueError, match=r"labels of shape \(1,\)") as info:
        DiffusionModel(PositionalDenoiser(), image_shape=IMAGE_SHAPE, num_classes=3)
    assert isinstance(info.value.__cause__, TypeError)


def test_a_denoiser_of_the_wrong_output_shape_is_refused():
    with pytest.raises(ValueError, match=r"\(1, 8, 8, 1\).*\(1, 8, 8, 3\)"):
        DiffusionModel(ListDenoiser(channels=3), image_shape=IMAGE_SHAPE)
