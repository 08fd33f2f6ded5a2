"""ControlNet: a trainable copy of the U-Net's encoder whose zero-initialised
residuals steer the frozen U-Net by a control image."""

import warnings

import keras
import numpy as np
import pytest

import keras_diffusion as kd
from keras_diffusion.models.controlnet import UNetViews

SHAPE = (8, 8, 1)


def _unet(**kwargs):
    return kd.UNet(SHAPE, widths=(8, 16), num_res_blocks=1, groups=4, **kwargs)


def _data(n=16):
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (n,) + SHAPE).astype("float32")
    # The control: where the image is bright, as a silhouette would be.
    controls = (images > 0).astype("float32")
    labels = rng.integers(0, 3, n).astype("int32")
    return images, controls, labels


def _randomise(model):
    rng = np.random.default_rng(1)
    for v in model.weights:
        v.assign(rng.normal(0, 0.2, v.shape).astype("float32"))


@pytest.mark.parametrize(
    "kwargs, extra",
    [
        ({}, []),
        ({"num_classes": 3}, [np.array([0, 2], "int32")]),
        (
            {"cross_attention_dim": 8, "attention_levels": (False, True)},
            [np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")],
        ),
    ],
    ids=["unconditional", "labels", "cross-attention"],
)
def test_an_untrained_controlnet_leaves_the_unet_bit_for_bit(kwargs, extra):
    unet = _unet(**kwargs)
    _randomise(unet)  # the output convolution too: a non-zero prediction
    controlnet = kd.ControlNet.from_unet(unet, conditioning_channels=1)
    views = UNetViews(unet)
    rng = np.random.default_rng(3)
    inputs = [rng.normal(size=(2,) + SHAPE).astype("float32")]
    inputs += [np.array([10.0, 900.0], "float32"), *extra]
    control = rng.uniform(0, 1, (2,) + SHAPE).astype("float32")
    residuals = controlnet([*inputs, control])
    # One residual a skip connection (stem, two blocks, a downsampling, a
    # block) and the middle's, each zero.
    assert len(residuals) == 5
    assert all(not np.asarray(r).any() for r in residuals)
    base = np.asarray(unet(inputs))
    assert np.abs(base).max() > 0.1
    np.testing.assert_array_equal(np.asarray(views(inputs, residuals, 1.0)), base)
    # The copy holds the U-Net's weights: its middle output is the U-Net's.
    for w in controlnet.get_layer("controlnet_mid").weights:
        w.assign(np.ones(w.shape, "float32"))
    moved = np.asarray(views(inputs, controlnet([*inputs, control]), 1.0))
    assert np.abs(moved - base).max() > 1e-3


@pytest.fixture(scope="module")
def trained():
    """`(base, controlled, base_weights)`: a tiny class-conditional model
    trained an epoch, and its ControlNet model trained 3 epochs on
    controls, its steps eager, sampling in graph mode (the comparisons are
    bit for bit)."""
    images, controls, labels = _data()
    keras.utils.set_random_seed(0)
    base = kd.DiffusionModel(
        _unet(num_classes=3),
        class_dropout=0.2,
        seed=0,
        ema_decay=0.9,
        sampler=kd.DDIMSampler(num_steps=4),
    )
    # Eager steps: 8 of them cost less than a trace; sampling is graph mode.
    base.compile(optimizer=keras.optimizers.Adam(1e-3), run_eagerly=True)
    base.fit(images, labels, epochs=1, batch_size=8, verbose=0)
    controlled = kd.enable_controlnet(base, conditioning_channels=1)
    before = [np.array(v.numpy()) for v in controlled.denoiser.weights]
    controlled.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    step_0 = controlled.generate(4, labels=1, control=controls[:4], seed=5, verbose=0)
    y = {"labels": labels, "control": controls}
    history = controlled.fit(images, y, epochs=3, batch_size=8, verbose=0)
    return base, controlled, before, step_0, history.history["loss"]


def test_it_starts_as_the_base_and_trains_the_controlnet_alone(trained):
    base, controlled, before, step_0, losses = trained
    images, controls, _ = _data()
    # At step 0 the controlled model draws the base model's images.
    np.testing.assert_array_equal(step_0, base.generate(4, labels=1, seed=5, verbose=0))
    assert np.isfinite(losses).all()
    # The base's EMA weights are the frozen U-Net's, unchanged by fit.
    assert not controlled.denoiser.trainable_variables
    after = [np.array(v.numpy()) for v in controlled.denoiser.weights]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    averaged = zip(base.averaged_variables, base.ema.values(), strict=True)
    ema = {id(v): x for v, x in averaged}
    for target, source in zip(before, base.denoiser.weights, strict=True):
        np.testing.assert_array_equal(target, np.asarray(ema.get(id(source), source)))
    # The ControlNet alone trains and is averaged.
    assert len(controlled.averaged_variables) == len(
        controlled.controlnet.trainable_variables
    )
    mid = controlled.controlnet.get_layer("controlnet_mid").kernel
    assert np.abs(np.asarray(mid)).max() > 0
    steered = controlled.generate(4, labels=1, control=controls[:4], seed=5, verbose=0)
    assert np.abs(steered - step_0).max() > 1e-3


def test_scale_zero_is_the_base_and_the_control_is_in_both_branches(trained):
    base, controlled, _, _, _ = trained
    _, controls, _ = _data()
    given = dict(labels=[0, 1, 2, 0], seed=7, verbose=0, guidance_scale=2.0)
    off = controlled.generate(4, control=controls[:4], control_scale=0.0, **given)
    np.testing.assert_array_equal(off, base.generate(4, **given))
    one = controlled.generate(4, control=controls[0], **given)
    four = controlled.generate(4, control=np.repeat(controls[:1], 4, 0), **given)
    np.testing.assert_array_equal(one, four)  # one control serves every image
    as_uint8 = (controls[:4] * 255).astype(np.uint8)
    controlled_images = controlled.generate(4, control=controls[:4], **given)
    np.testing.assert_array_equal(
        controlled.generate(4, control=as_uint8, **given), controlled_images
    )
    # The edits take the control: a full-strength img2img and an inpaint of
    # the whole image are generate. Their sampling loops are other compiled
    # graphs, whose fusions may round differently: 1e-6, as
    # tests/models/editing_test.py allows the edits of a base model.
    images, _, _ = _data(4)
    edits = (
        controlled.img2img(images, 1.0, control=controls[:4], **given),
        controlled.inpaint(images, np.ones(SHAPE[:2]), control=controls[:4], **given),
    )
    for edited in edits:
        np.testing.assert_allclose(edited, controlled_images, atol=1e-6)
    assert np.abs(controlled_images - off).max() > 1e-3  # the control shows


def test_a_saved_controlled_model_samples_alike_and_trains_on(trained, tmp_path):
    _, controlled, before, _, _ = trained
    images, controls, labels = _data()
    path = str(tmp_path / "controlled.keras")
    controlled.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an optimizer that does not load warns
        loaded = keras.saving.load_model(path)
    # Four images, as the other tests' calls: a loop traced for one batch
    # size, not relaxed to any (whose kernels round otherwise).
    given = dict(labels=2, control=controls[:4], seed=3, verbose=0)
    np.testing.assert_array_equal(
        loaded.generate(4, **given), controlled.generate(4, **given)
    )
    assert not loaded.denoiser.trainable_variables
    assert len(loaded.optimizer.variables) == len(controlled.optimizer.variables)
    loaded.fit(images, {"labels": labels, "control": controls}, batch_size=8, verbose=0)
    after = [np.array(v.numpy()) for v in loaded.denoiser.weights]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize(
    "schedule, sampler",
    [
        (kd.FlowMatchSchedule(), kd.EulerSampler(num_steps=2)),
        (kd.EDMSchedule(), kd.EulerSampler(num_steps=2)),
        (kd.ConsistencySchedule(), None),
    ],
    ids=["flow", "edm", "few-step"],
)
def test_every_process_trains_a_controlnet_from_tf_data(schedule, sampler):
    import tensorflow as tf

    images, controls, _ = _data(8)
    keras.utils.set_random_seed(0)
    unet = _unet()
    # As if trained: a zero output convolution would pass no gradient back.
    kernel = unet.get_layer("out_conv").kernel
    kernel.assign(np.random.default_rng(1).normal(0, 0.1, kernel.shape))
    base = kd.DiffusionModel(unet, schedule=schedule, seed=0, sampler=sampler)
    controlled = kd.enable_controlnet(base, conditioning_channels=1)
    # Two steps: eager, rather than a trace of the step.
    controlled.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    data = tf.data.Dataset.from_tensor_slices((images, controls)).batch(4)
    history = controlled.fit(data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    mid = controlled.controlnet.get_layer("controlnet_mid").kernel
    assert np.abs(np.asarray(mid)).max() > 0  # the residuals trained
    out = controlled.generate(2, control=controls[:2], seed=0, verbose=0)
    off = controlled.generate(2, control=controls[:2], control_scale=0.0, seed=0)
    assert out.shape == (2,) + SHAPE and np.abs(out - off).max() > 0


def test_bad_controls_and_models_are_refused_by_name(trained):
    base, controlled, _, _, _ = trained
    images, controls, labels = _data()
    with pytest.raises(ValueError, match="`control` must give the control images"):
        controlled.generate(2, labels=0)
    with pytest.raises(ValueError, match=r"shape \(8, 8, 1\).*\(2, 8, 8, 3\)"):
        controlled.generate(2, labels=0, control=np.zeros((2, 8, 8, 3)))
    with pytest.raises(ValueError, match=r"\[0, 1\].*\[-1, "):
        controlled.generate(2, labels=0, control=-np.ones((2, 8, 8, 1)))
    with pytest.raises(ValueError, match="control_scale"):
        controlled.generate(2, labels=0, control=controls[:2], control_scale=-1.0)
    with pytest.raises(ValueError, match="`control` needs a model with a ControlNet"):
        base.generate(2, labels=0, control=controls[:2])
    with pytest.raises(ValueError, match="'labels': labels, 'control'"):
        controlled.fit(images, controls, verbose=0)
    with pytest.raises(ValueError, match=r"Received: control images of shape \(16, 4"):
        controlled.fit(images, {"labels": labels, "control": controls[:, :4]})
    with pytest.raises(ValueError, match="has a ControlNet already"):
        kd.enable_controlnet(controlled)
    with pytest.raises(ValueError, match="ControlNet does not export to diffusers"):
        kd.to_diffusers(controlled, "never")
    # uint8 controls train as generate takes them: 255 is 1.
    from keras_diffusion.models import controlled as controlled_lib

    as_uint8 = (controls * 255).astype(np.uint8)
    batch = (images, {"labels": labels, "control": as_uint8})
    np.testing.assert_array_equal(
        np.asarray(controlled_lib.unpack(controlled, batch)[2]), controls
    )
    with pytest.raises(ValueError, match="another U-Net: its widths"):
        kd.DiffusionModel(
            _unet(num_classes=3),
            controlnet=kd.ControlNet(
                kd.UNet(SHAPE, widths=(8, 8), num_res_blocks=1, groups=4).get_config()
            ),
        )


def test_a_denoiser_it_cannot_copy_is_one_line():
    own = keras.Sequential(
        [keras.Input(SHAPE), keras.layers.Conv2D(1, 3, padding="same")]
    )
    model = kd.DiffusionModel(own, ema_decay=None)
    with pytest.raises(TypeError, match="blocks of a keras_diffusion.UNet.*Sequential"):
        kd.enable_controlnet(model)
    meanflow = kd.DiffusionModel(
        kd.UNet(
            SHAPE, widths=(8,), num_res_blocks=1, groups=4, num_classes=2, time_inputs=3
        ),
        schedule=kd.MeanFlowSchedule(),
        class_dropout=0.1,
    )
    with pytest.raises(ValueError, match="--guidance-max 1"):
        kd.enable_controlnet(meanflow)


def test_an_extractor_makes_each_images_control_in_the_step(monkeypatch):
    from keras_diffusion.conditioning import control
    from keras_diffusion.models import controlled as controlled_lib

    images, _, _ = _data(8)
    keras.utils.set_random_seed(0)
    base = kd.DiffusionModel(_unet(), seed=0, sampler=kd.DDIMSampler(num_steps=2))
    controlled = kd.enable_controlnet(
        base, conditioning_channels=1, extractor="silhouette"
    )
    seen, call = [], controlled_lib.controlled_call

    def recording(model, inputs, given, *args):
        seen.append(np.asarray(given))
        return call(model, inputs, given, *args)

    monkeypatch.setattr(controlled_lib, "controlled_call", recording)
    controlled.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    controlled.fit(images, batch_size=8, shuffle=False, verbose=0)  # the base's data
    silhouettes = np.asarray(control.silhouette(images))
    assert 0 < silhouettes.mean() < 1
    np.testing.assert_array_equal(seen[0], silhouettes)
    np.testing.assert_array_equal(controlled.controlnet.extract(images), silhouettes)
    loaded = kd.DiffusionModel.from_config(controlled.get_config()).controlnet
    assert loaded.extractor == {
        "name": "silhouette",
        "background": -1.0,
        "threshold": 0.2,
    }
    assert kd.enable_controlnet(base, extractor="edges").controlnet.control_shape == (
        SHAPE[:2] + (1,)
    )
    with pytest.raises(ValueError, match="1 channel. Received: conditioning_chan"):
        kd.ControlNet(base.denoiser.get_config(), 3, extractor="edges")


def test_a_text_model_trains_a_controlnet_under_its_prompts():
    # The frozen U-Net attends to the captions (its middle block), the
    # frozen text encoder makes them; fit on the captioned data alone, the
    # extractor making the controls (given controls are refused).
    captions = np.array(["red heart", "cat face", "dog face", "green heart"] * 2)
    text = kd.TextConditioning(
        sequence_length=4, max_tokens=16, width=8, depth=1, heads=2
    )
    text.adapt(captions)
    unet = kd.UNet(
        SHAPE, widths=(8,), num_res_blocks=1, groups=4, cross_attention_dim=8,
        attention_levels=(False,), mid_attention=True,
    )  # fmt: skip
    kernel = unet.get_layer("out_conv").kernel  # as if trained (see above)
    kernel.assign(np.random.default_rng(1).normal(0, 0.1, kernel.shape))
    sampler = kd.DDIMSampler(num_steps=2)
    base = kd.DiffusionModel(unet, conditioning=text, seed=0, sampler=sampler)
    controlled = kd.enable_controlnet(base, extractor="silhouette")
    controlled.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    parts = (controlled.denoiser, controlled.conditioning)  # frozen, both
    frozen = [v.numpy() for part in parts for v in part.weights]
    assert frozen and not any(v.trainable for part in parts for v in part.weights)
    images, _, _ = _data(8)
    controlled.fit(images, captions, batch_size=4, epochs=2, verbose=0)
    controls = controlled.controlnet.extract(images)
    kept = [v.numpy() for part in parts for v in part.weights]
    for a, b in zip(frozen, kept, strict=True):
        np.testing.assert_array_equal(a, b)
    given = dict(prompts=["red heart", "cat face"], guidance_scale=2.0, seed=0)
    off = controlled.generate(2, control=controls[:2], control_scale=0.0, **given)
    np.testing.assert_array_equal(off, base.generate(2, **given))
    steered = controlled.generate(2, control=controls[:2], **given)
    assert np.abs(steered - off).max() > 1e-3
    with pytest.raises(ValueError, match="text model makes its controls of the"):
        kd.enable_controlnet(base)
