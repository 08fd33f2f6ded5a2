"""A text model trained with `fit`: `TextConditioning` and
`DiffusionModel(conditioning=...)`, on a tiny denoiser `[x_t, t, context]`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_diffusion as kd
from tests.denoisers import conv_denoiser, tiny_unet

CAPTIONS = [
    "red heart",
    "cat face",
    "smiling face with heart-shaped eyes",
    "waving hand sign: medium-dark skin tone",
]
LENGTH, WIDTH = 6, 8
# EDM's x0 stays in range on a model of a few steps (a VP one's saturates).
SAMPLER = kd.EulerSampler(num_steps=3)
PROMPTS = ["red heart", "cat face"]


def _text(**overrides):
    text = kd.TextConditioning(
        **{
            "sequence_length": LENGTH,
            "max_tokens": 64,
            "width": WIDTH,
            "depth": 1,
            "heads": 2,
            **overrides,
        }
    )
    text.adapt(CAPTIONS)
    return text


def _model(schedule=None, **overrides):
    model = kd.DiffusionModel(
        conv_denoiser(
            context_shape=(LENGTH, WIDTH),
            time_inputs=getattr(schedule, "time_inputs", 1),
        ),
        schedule,
        conditioning=_text(**overrides),
        ema_decay=0.5,
        seed=0,
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    return model


def _data():
    images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1))
    return images.astype("float32"), np.array(CAPTIONS * 2)


def _generate(model, **kwargs):
    kwargs = {"prompts": PROMPTS, "guidance_scale": 2.0, **kwargs}
    return model.generate(2, sampler=SAMPLER, seed=1, verbose=0, **kwargs)


@pytest.fixture(scope="module")
def trained():
    """A text model fitted on arrays of str, then on tf.data batches."""
    model = _model(kd.EDMSchedule())
    encoder = [v.numpy() for v in model.conditioning.trainable_variables]
    images, texts = _data()
    model.fit(images, texts, batch_size=4, epochs=1, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices((images, list(texts))).batch(4)
    model.fit(dataset, epochs=1, verbose=0)
    return model, encoder


def test_tokenizer_lowers_case_and_splits_punctuation():
    text = _text()
    tokens = text.tokenize(tf.constant(["Heart-Shaped", "heart shaped", "", "dog"]))
    tokens = tokens.numpy()
    assert tokens.shape == (4, LENGTH) and tokens.dtype == np.int32
    np.testing.assert_array_equal(tokens[0], tokens[1])
    assert tokens[0][:2].min() > 1  # both words known
    assert not tokens[2].any()  # the empty prompt: all padding, the null
    assert tokens[3][0] == 1  # out of vocabulary
    assert "medium" in text.vocabulary and "dark" in text.vocabulary


def test_the_tokenizer_leaves_xla_on():
    # Tokens are made outside the step: the tokenizer must not turn XLA
    # off for the model, as a TextVectorization among its layers would.
    model = _model()
    model.compile(optimizer="adam", jit_compile=True)
    assert model.jit_compile is True


@pytest.mark.xla
def test_validation_data_is_tokenized_as_the_training_data_is(recwarn):
    # Under XLA, captions that reached the compiled test step as strings
    # would not compile: a warning, and XLA off for the model from then on.
    model = _model()
    model.compile(optimizer="adam", jit_compile=True, steps_per_execution=1)
    images, texts = _data()
    dataset = tf.data.Dataset.from_tensor_slices((images, list(texts))).batch(4)
    for validation in ((images[:4], list(texts[:4])), dataset):
        history = model.fit(
            images, texts, batch_size=4, validation_data=validation, verbose=0
        )
        assert np.isfinite(history.history["val_loss"]).all()
    # validation_split: the last half validates, as Keras cuts arrays.
    history = model.fit(images, texts, batch_size=4, validation_split=0.5, verbose=0)
    assert np.isfinite(history.history["val_loss"]).all()
    assert model.optimizer.iterations.numpy() == 2 * 2 + 1
    # `evaluate` takes every form `fit` takes, tokenized in the pipeline:
    # an object array of captions reaching the XLA step aborted the process.
    for data in (
        (images, texts.astype(object)),
        (images, list(texts)),
        ((images, texts),),
        (dataset,),
    ):
        loss = model.evaluate(*data, batch_size=4, verbose=0)
        assert np.isfinite(loss)
    assert model.jit_compile is True
    assert not [w for w in recwarn if "XLA" in str(w.message)]
    with pytest.raises(TypeError, match=r"`validation_data`.*labels need"):
        model.fit(images, texts, validation_data=(images, np.arange(8)), verbose=0)


def test_fit_trains_the_encoder_and_the_ema_averages_it(trained):
    model, before = trained
    encoder = model.conditioning.trainable_variables
    assert model.optimizer.iterations.numpy() == 4
    assert all(
        not np.allclose(b, v.numpy()) for b, v in zip(before, encoder, strict=True)
    )
    live = model.denoiser.trainable_variables
    assert len(model.ema.shadows) == len(live) + len(encoder)
    # Generating with the EMA encodes with the averaged encoder.
    ema, raw = _generate(model), _generate(model, use_ema=False)
    saved = [v.numpy() for v in encoder]
    try:
        for variable in encoder:
            variable.assign(np.zeros(variable.shape))
        np.testing.assert_array_equal(_generate(model), ema)
        assert not np.allclose(_generate(model, use_ema=False), raw)
    finally:
        for variable, value in zip(encoder, saved, strict=True):
            variable.assign(value)


def test_save_load_takes_raw_strings_gives_the_same_images_and_fits(trained, tmp_path):
    model, _ = trained
    path = str(tmp_path / "text.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.conditioning.vocabulary == model.conditioning.vocabulary
    np.testing.assert_array_equal(
        loaded.seed_generator.state.numpy(), model.seed_generator.state.numpy()
    )
    for kwargs in ({}, {"negative_prompts": "cat face"}):
        np.testing.assert_allclose(
            _generate(loaded, **kwargs), _generate(model, **kwargs), atol=1e-6
        )
    loaded.fit(*_data(), batch_size=4, epochs=1, verbose=0)
    assert loaded.optimizer.iterations.numpy() == 6


def test_prompts_and_negative_prompts_steer_guidance(trained):
    model, _ = trained
    guided = _generate(model)
    assert not np.allclose(guided, _generate(model, prompts=PROMPTS[::-1]))
    assert not np.allclose(guided, _generate(model, negative_prompts="smiling face"))
    # One str is every image's prompt.
    np.testing.assert_array_equal(
        _generate(model, prompts="red heart"),
        _generate(model, prompts=["red heart", "red heart"]),
    )
    # Without guidance the negative prompt has no part.
    np.testing.assert_allclose(
        _generate(model, guidance_scale=1.0, negative_prompts="cat face"),
        _generate(model, guidance_scale=1.0),
        atol=1e-5,
    )


def test_generate_guides_prompts_at_the_recorded_scale(trained, monkeypatch):
    model, _ = trained
    given = {"sampler": SAMPLER, "seed": 1, "verbose": 0}
    plain, at_three = (
        model.generate(2, prompts=PROMPTS, guidance_scale=w, **given) for w in (1, 3)
    )
    assert not np.allclose(plain, at_three)
    # None recorded (a model built in Python): plain conditional sampling.
    np.testing.assert_array_equal(model.generate(2, prompts=PROMPTS, **given), plain)
    monkeypatch.setattr(model, "guidance_scale", 3.0)  # as a run records it
    np.testing.assert_array_equal(model.generate(2, prompts=PROMPTS, **given), at_three)
    # The empty prompt is not guided: both branches would be the same.
    assert model.default_guidance_scale(prompts=None) == 1.0


def test_diagnose_times_a_text_model_on_its_captions():
    model = _model(kd.EDMSchedule())
    # Under XLA a caption reaching the step alone aborted the process.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True)
    images, texts = _data()
    dataset = tf.data.Dataset.from_tensor_slices((images, list(texts)))
    dataset = dataset.batch(4, drop_remainder=True)
    report = kd.diagnostics.diagnose(model, dataset, steps=2, warmup=1, verbose=False)
    assert report.batch_size == 4 and report.step_images_per_sec > 0
    assert report.traces_after_warmup == 0


def test_inpaint_and_img2img_take_prompts(trained):
    model, _ = trained
    images = _data()[0][:2]
    kwargs = {"sampler": SAMPLER, "seed": 1, "verbose": 0, "guidance_scale": 2.0}
    full = model.inpaint(images, np.ones((8, 8)), prompts=PROMPTS, **kwargs)
    np.testing.assert_allclose(full, _generate(model), atol=1e-5)
    half = np.zeros((8, 8))
    half[:, 4:] = 1
    filled = model.inpaint(images, half, prompts=PROMPTS, **kwargs)
    other = model.inpaint(images, half, prompts=PROMPTS[::-1], **kwargs)
    assert not np.allclose(filled, other)
    edited = model.img2img(images, 2 / 3, prompts=PROMPTS, **kwargs)
    negative = model.img2img(
        images, 2 / 3, prompts=PROMPTS, negative_prompts="red heart", **kwargs
    )
    assert edited.shape == images.shape and not np.allclose(edited, negative)


@pytest.mark.parametrize(
    "schedule",
    [
        kd.NoiseSchedule(),
        kd.EDMSchedule(),
        kd.FlowMatchSchedule(),
        kd.ConsistencySchedule(),
        kd.MeanFlowSchedule(),
    ],
    ids=["vp", "edm", "flow", "consistency", "meanflow"],
)
def test_each_process_trains_and_generates_with_prompts(schedule):
    model = _model(schedule)
    images, texts = _data()
    # One (images, captions) pair, the README's form, as for labels.
    model.fit((images[:4], list(texts[:4])), batch_size=4, epochs=1, verbose=0)
    out = model.generate(2, prompts=PROMPTS, guidance_scale=2.0, seed=0, verbose=0)
    assert out.shape == (2, 8, 8, 1) and np.isfinite(out).all()
    if schedule.guidance_input:  # one call at the scale: no second branch
        with pytest.raises(ValueError, match="negative_prompts="):
            model.generate(2, prompts=PROMPTS, negative_prompts="a", verbose=0)


def test_lora_freezes_the_encoder_and_keeps_its_weights(trained, tmp_path):
    model, _ = trained
    adapted = kd.enable_lora(model, rank=2)
    assert not adapted.conditioning.trainable_variables
    assert len(adapted.ema.shadows) == len(adapted.denoiser.trainable_variables)
    for a, b in zip(
        adapted.conditioning.weights, model.conditioning.weights, strict=True
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Loaded, the encoder stays frozen: the optimizer, built on the same
    # trainable variables, loads its state and trains on as if never saved.
    adapted.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    images, texts = _data()
    adapted.fit(images, texts, batch_size=4, shuffle=False, verbose=0)
    adapted.save(tmp_path / "lora_text.keras")
    loaded = keras.saving.load_model(tmp_path / "lora_text.keras")
    paths = [v.path for v in adapted.trainable_variables]
    assert [v.path for v in loaded.trainable_variables] == paths
    assert not loaded.conditioning.trainable_variables
    assert int(loaded.optimizer.iterations) == 2
    losses = [
        m.fit(images, texts, batch_size=4, shuffle=False, verbose=0).history["loss"]
        for m in (adapted, loaded)
    ]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)


def test_merge_lora_gives_the_text_encoder_back_its_training():
    # A U-Net (a functional denoiser's config records its LoRA layers, so
    # merge_lora refuses it).
    unet = tiny_unet(cross_attention_dim=WIDTH, widths=(4,), attention_levels=(True,))
    model = kd.DiffusionModel(unet, conditioning=_text(), ema_decay=0.5, seed=0)
    adapted = kd.enable_lora(model, rank=2)
    merged = kd.merge_lora(adapted)
    # Trainable as before the LoRA froze it, and averaged by the EMA again.
    shapes = [tuple(v.shape) for v in model.conditioning.trainable_variables]
    assert [tuple(v.shape) for v in merged.conditioning.trainable_variables] == shapes
    encoder = merged.conditioning.trainable_variables
    assert len(merged.ema.shadows) == len(model.averaged_variables)
    shadows = merged.ema.values()[-len(encoder) :]
    for shadow, variable in zip(shadows, encoder, strict=True):
        np.testing.assert_array_equal(shadow, variable.numpy())


def test_text_and_label_arguments_are_refused_by_the_other_kind(trained):
    model, _ = trained
    with pytest.raises(ValueError, match=r"`prompts`.*labels=\[0, 1\]"):
        model.generate(2, labels=[0, 1])
    with pytest.raises(ValueError, match=r"`prompts`.*prompts=\['a'\]"):
        model.generate(2, prompts=["a"])
    labelled = kd.DiffusionModel(conv_denoiser(num_classes=2), num_classes=2)
    for name in ("prompts", "negative_prompts"):
        with pytest.raises(ValueError, match=rf"`{name}`.*{name}='cat'"):
            labelled.generate(1, **{name: "cat"})
    with pytest.raises(TypeError, match="labels need `num_classes`.*int64"):
        model.fit(_data()[0], np.arange(8), verbose=0)
    with pytest.raises(TypeError, match=r"`fit`.*texts\[5\]=None of type NoneType"):
        model.fit(_data()[0], ["a"] * 5 + [None] + ["b"] * 2, verbose=0)
    with pytest.raises(TypeError, match=r"`evaluate`.*texts\[0\]=None"):
        model.evaluate(_data()[0], [None] + ["b"] * 7, verbose=0)
    with pytest.raises(ValueError, match="`class_dropout`.*received|class_dropout="):
        kd.DiffusionModel(
            conv_denoiser(context_shape=(LENGTH, WIDTH)),
            conditioning=_text(),
            class_dropout=0.1,
        )
    with pytest.raises(ValueError, match=r"\[x_t, t\].*conditioning="):
        kd.DiffusionModel(conv_denoiser(), conditioning=_text())
    with pytest.raises(ValueError, match=r"\(6, 8\).*sequence_length=6, width=4"):
        kd.DiffusionModel(
            conv_denoiser(context_shape=(LENGTH, WIDTH)), conditioning=_text(width=4)
        )


def test_a_denoiser_of_a_text_context_needs_a_text_conditioning():
    unet = tiny_unet(cross_attention_dim=WIDTH)
    context = conv_denoiser(context_shape=(LENGTH, WIDTH))
    for denoiser, kwargs in ((unet, {}), (context, {}), (context, {"num_classes": 3})):
        given = kwargs.get("num_classes")
        with pytest.raises(
            ValueError,
            match=rf"\[x_t, t, context\].*`conditioning=keras_diffusion\."
            rf"TextConditioning\(...\)`.*conditioning=None, num_classes={given}",
        ):
            kd.DiffusionModel(denoiser, **kwargs)


def test_fit_before_adapt_and_a_pydataset_of_strings_are_refused():
    model = kd.DiffusionModel(
        conv_denoiser(context_shape=(LENGTH, WIDTH)),
        conditioning=kd.TextConditioning(LENGTH, 64, WIDTH, 1, 2),
    )
    model.compile(optimizer="adam", jit_compile=False)
    with pytest.raises(ValueError, match=r"adapt\(captions\).*vocabulary=None"):
        model.fit(*_data(), verbose=0)
    with pytest.raises(ValueError, match=r"adapt\(captions\)"):
        model.generate(1, prompts="cat")
    model.conditioning.adapt(CAPTIONS)

    class Strings(keras.utils.PyDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return _data()

    with pytest.raises(TypeError, match=r"conditioning.tokenize\(texts\)"):
        model.fit(Strings(), verbose=0)

    class Tokens(Strings):
        def __getitem__(self, index):
            images, texts = _data()
            return images, model.conditioning.tokenize(texts).numpy()

    model.fit(Tokens(), verbose=0)
    assert model.optimizer.iterations.numpy() == 1


def test_posthoc_ema_tracks_and_sets_the_encoder():
    from keras_diffusion.averages import posthoc

    model = kd.DiffusionModel(
        conv_denoiser(context_shape=(LENGTH, WIDTH)),
        kd.EDMSchedule(),
        conditioning=_text(),
        ema_decay=None,
        posthoc_ema=[0.05, 0.1],
        seed=0,
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    model.fit(*_data(), batch_size=8, epochs=1, verbose=0)
    copy = posthoc.without_profiles(model)
    posthoc.assign(copy, [v.numpy() for v in model.averaged_variables])
    np.testing.assert_allclose(
        _generate(copy, use_ema=False), _generate(model, use_ema=False), atol=1e-6
    )
