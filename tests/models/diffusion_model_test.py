import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_diffusion import DiffusionModel, NoiseSchedule
from keras_diffusion.models.sampler_choice import default_sampler
from keras_diffusion.samplers import DDIMSampler
from keras_diffusion.schedules import Process
from tests.conftest import make_toy_images
from tests.denoisers import conv_denoiser

FIXED_SEED = tf.constant([3, 4], dtype="int32")


def fixed_loss(model, images, labels=None):
    """The loss on a fixed draw of timesteps and noise: comparable across time."""
    return float(model.diffusion_loss(images, labels, seed=FIXED_SEED))


def make_model(make_unet, **kwargs):
    """A model of `make_unet()` (or of any denoiser factory), in graph mode."""
    model = DiffusionModel(make_unet(), NoiseSchedule(100, "cosine"), **kwargs)
    # Graph mode: these tests are about the step's semantics, which XLA (the
    # default, tests/trainers/xla_test.py) shares; compiling each tiny model
    # with XLA would double the time of this file.
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    return model


def conv(**kwargs):
    """`conv_denoiser` as a `make_unet` for `make_model`: for tests of the
    step, EMA and seeds, which do not depend on the denoiser; it traces in a
    fraction of a U-Net's time (the U-Net trains in test_fit_reduces_the_loss,
    test_mixed_precision_scales_the_loss_and_learns and
    test_conditional_unet_trains_and_samples_with_guidance)."""
    return conv_denoiser(convs=3, **kwargs)


def one_level_unet(make_unet):
    """A one-level `make_unet` factory: it learns the toy data as two levels
    do and traces faster (measured, 32 steps: the loss falls to 0.38, 0.60
    and 0.17 of its start for epsilon, v and sample, 0.38 in mixed
    precision, against 0.38, 0.59, 0.16 and 0.38 with two levels)."""
    return lambda **kwargs: make_unet(widths=(4,), **kwargs)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
def test_fit_reduces_the_loss(make_unet, toy_images, prediction_type):
    # The U-Net, not `conv`: it starts at a zero output, so a 20% drop is
    # learning; a conv denoiser drops further by undoing its random start,
    # and from a zero output it did not learn epsilon in these 32 steps.
    model = make_model(one_level_unet(make_unet), prediction_type=prediction_type)
    before = fixed_loss(model, toy_images)
    model.fit(toy_images, epochs=8, batch_size=16, verbose=0)
    assert fixed_loss(model, toy_images) < 0.8 * before


def test_custom_keras_denoiser_trains(toy_images):
    model = DiffusionModel(conv_denoiser(convs=3), NoiseSchedule(100, "cosine"))
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    before = fixed_loss(model, toy_images)
    history = model.fit(toy_images, epochs=8, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert fixed_loss(model, toy_images) < 0.8 * before


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fresh_timesteps_every_step_with_steps_per_execution(toy_images, jit_compile):
    denoiser = conv_denoiser(record=True)
    model = DiffusionModel(denoiser, NoiseSchedule(1000), ema_decay=None)
    model.compile(optimizer="sgd", steps_per_execution=4, jit_compile=jit_compile)
    model.fit(toy_images, epochs=1, batch_size=8, verbose=0)
    recorder = denoiser.get_layer("timestep_recorder")
    steps = len(toy_images) // 8
    assert int(recorder.count.numpy()) == steps
    means = recorder.history.numpy()[:steps]
    assert len(np.unique(np.round(means, 4))) == steps
    # Timesteps are drawn from U{0..T-1}: the mean of all 64 is near (T-1)/2
    # (the standard deviation of one draw is about T/sqrt(12)).
    sigma = 1000 / np.sqrt(12) / np.sqrt(steps * 8)
    assert abs(means.mean() - 499.5) < 4.5 * sigma


def test_same_global_seed_same_training(toy_images):
    weights = []
    for _ in range(2):
        keras.utils.set_random_seed(7)
        model = make_model(conv)
        model.fit(toy_images[:32], epochs=1, batch_size=16, verbose=0)
        weights.append([v.numpy() for v in model.denoiser.trainable_variables])
    for a, b in zip(*weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_run_eagerly_gives_the_compiled_first_step_loss(toy_images):
    losses = []
    for run_eagerly in (False, True):
        keras.utils.set_random_seed(11)
        model = DiffusionModel(conv(), NoiseSchedule(100, "cosine"))
        model.compile(optimizer="adam", run_eagerly=run_eagerly)
        history = model.fit(
            toy_images[:16], epochs=1, batch_size=16, verbose=0, shuffle=False
        )
        losses.append(history.history["loss"][0])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)


def test_partial_last_batch_does_not_retrace(toy_images):
    def count_traces(num_images, epochs):
        model = make_model(conv)
        traces = []
        train_step = model.train_step
        model.train_step = lambda data: traces.append(data) or train_step(data)
        dataset = tf.data.Dataset.from_tensor_slices(toy_images[:num_images])
        model.fit(dataset.batch(16), epochs=epochs, verbose=0)
        return len(traces)

    # Batches of 16, 16 and 8 over three epochs trace no more than full ones.
    assert count_traces(40, epochs=3) == count_traces(16, epochs=1)


def test_fit_on_a_tf_dataset_does_not_warn_about_shuffle(toy_images):
    model = make_model(conv)
    dataset = tf.data.Dataset.from_tensor_slices(toy_images[:16]).batch(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(dataset, epochs=1, verbose=0)
    assert not [w for w in caught if "shuffle" in str(w.message)]


def test_mixed_precision_scales_the_loss_and_learns(make_unet, toy_images):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = make_model(one_level_unet(make_unet))
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.denoiser.compute_dtype == "float16"
    assert model.schedule.snr(np.array([5])).dtype == "float32"
    before = fixed_loss(model, toy_images)
    model.fit(toy_images, epochs=8, batch_size=16, verbose=0)
    after = fixed_loss(model, toy_images)
    assert np.isfinite(after) and after < 0.8 * before
    assert all(v.dtype == "float32" for v in model.ema.shadows)


def test_ema_starts_at_the_live_weights_and_trails_them(toy_images):
    model = make_model(conv, ema_decay=0.9, ema_warmup=False)
    live = model.denoiser.trainable_variables
    for shadow, variable in zip(model.ema.shadows, live, strict=True):
        np.testing.assert_array_equal(shadow.numpy(), variable.numpy())
    before = [v.numpy() for v in live]
    shadows_before = [s.numpy() for s in model.ema.shadows]
    model.fit(toy_images[:16], epochs=1, batch_size=16, verbose=0)
    # One update: ema = 0.9 ema + 0.1 w_new.
    for shadow, old_shadow, variable in zip(
        model.ema.shadows, shadows_before, live, strict=True
    ):
        np.testing.assert_allclose(
            shadow.numpy(), 0.9 * old_shadow + 0.1 * variable.numpy(), atol=1e-6
        )
    assert any(not np.allclose(b, v.numpy()) for b, v in zip(before, live, strict=True))


@pytest.mark.parametrize("jit", [False, True])
def test_the_ema_moves_once_an_update_under_gradient_accumulation(toy_images, jit):
    # 8 batches with updates every 4: the weights change at batches 4 and 8,
    # and the EMA with them, twice (it moved on each batch before: 8 times).
    model = DiffusionModel(conv(), NoiseSchedule(100), ema_decay=0.5, ema_warmup=False)
    optimizer = keras.optimizers.Adam(3e-3, gradient_accumulation_steps=4)
    model.compile(optimizer=optimizer, jit_compile=jit)
    live = model.denoiser.trainable_variables
    seen = [[v.numpy() for v in live]]

    class Weights(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append([v.numpy() for v in live])

    model.fit(toy_images[:16], epochs=1, batch_size=2, verbose=0, callbacks=[Weights()])
    assert int(optimizer.iterations) == 2 and int(model.ema.num_updates) == 2
    w0, w1, w2 = seen[0], seen[4], seen[8]
    assert not np.allclose(w1[0], w0[0]) and np.array_equal(seen[3][0], w0[0])
    for shadow, a, b, c in zip(model.ema.shadows, w0, w1, w2, strict=True):
        np.testing.assert_allclose(
            shadow.numpy(), 0.25 * a + 0.25 * b + 0.5 * c, atol=1e-6
        )


class _NoDraws(Process):
    """The network at t = 1 on x0, its MSE to x0: a loss with no draws, so
    that a batch split in micro-batches sees the same examples."""

    name = "no-draws-test"
    sampler_family = "flow"

    def training_loss(self, step):
        out = step.network(step.x0, ops.ones((step.batch_size,)))
        return ops.mean(step.mean_square(out - step.x0))

    def get_config(self):
        return {}


def test_four_micro_batches_make_the_update_of_their_whole_batch(toy_images):
    def trained(batch_size, accumulate):
        keras.utils.set_random_seed(0)
        model = DiffusionModel(conv(), _NoDraws(), ema_decay=0.9, seed=0)
        optimizer = keras.optimizers.Adam(1e-2, gradient_accumulation_steps=accumulate)
        model.compile(optimizer=optimizer, jit_compile=False)
        model.fit(toy_images[:32], batch_size=batch_size, verbose=0, shuffle=False)
        return [
            v.numpy() for v in model.denoiser.trainable_variables + model.ema.shadows
        ]

    whole, split = trained(16, None), trained(4, 4)
    for a, b in zip(whole, split, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-6)
    # Without accumulation the same batches make 8 updates, not 2.
    assert not np.allclose(trained(4, None)[0], whole[0], atol=1e-3)


def test_test_step_reports_the_exact_loss_of_a_known_prediction(toy_images):
    # A zero output (a fresh U-Net's; here a conv denoiser's, its last
    # convolution zeroed), so the x0-prediction loss is mean(x0 ** 2).
    model = make_model(conv, prediction_type="sample")
    for variable in model.denoiser.layers[-1].trainable_variables:
        variable.assign(np.zeros(variable.shape, "float32"))
    result = model.evaluate(toy_images, batch_size=64, verbose=0, return_dict=True)
    np.testing.assert_allclose(result["loss"], np.mean(toy_images**2), rtol=1e-5)
    history = model.fit(
        toy_images,
        epochs=1,
        batch_size=32,
        verbose=0,
        validation_data=toy_images[:32],
    )
    assert "val_loss" in history.history


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
def test_min_snr_weights(make_unet, prediction_type):
    model = make_model(
        make_unet,
        prediction_type=prediction_type,
        loss_weighting="min_snr",
        min_snr_gamma=5.0,
    )
    t = np.array([0, 20, 60, 99])
    snr = model.schedule.alphas_cumprod_float64[t]
    snr = snr / (1 - snr)
    expected = {
        "epsilon": np.minimum(snr, 5.0) / snr,
        "v_prediction": np.minimum(snr, 5.0) / (snr + 1),
        "sample": np.minimum(snr, 5.0),
    }[prediction_type]
    got = ops.convert_to_numpy(
        model.schedule.min_snr_weight(t, prediction_type, model.schedule.min_snr_gamma)
    )
    np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_loss_weighting_none_is_plain_mse(make_unet, toy_images):
    plain = make_model(make_unet, loss_weighting="none")
    # `None` is how models saved before named "none"; both train alike.
    legacy = DiffusionModel(plain.denoiser, plain.schedule, loss_weighting=None)
    assert plain.schedule.loss_weighting == legacy.schedule.loss_weighting == "none"
    assert legacy.schedule.get_config()["loss_weighting"] == "none"
    assert fixed_loss(plain, toy_images[:8]) == fixed_loss(legacy, toy_images[:8])


def test_the_objective_arguments_set_a_copy_of_the_schedule():
    schedule = NoiseSchedule(20)
    model = DiffusionModel(
        conv(), schedule, "v_prediction", loss_weighting="min_snr", min_snr_gamma=3.0
    )
    held = model.schedule
    assert (held.prediction_type, held.loss_weighting, held.min_snr_gamma) == (
        "v_prediction",
        "min_snr",
        3.0,
    )
    assert model.prediction_type == "v_prediction"
    # The caller's schedule is left as it was.
    assert held is not schedule
    assert (schedule.prediction_type, schedule.loss_weighting) == ("epsilon", "none")
    assert schedule.min_snr_gamma == 5.0
    # The model's config holds none of them: its schedule's does.
    config = model.get_config()
    for name in ("prediction_type", "loss_weighting", "min_snr_gamma"):
        assert name not in config
        assert config["schedule"]["config"][name] == getattr(held, name)
    # A schedule that already holds them is used as it is.
    assert DiffusionModel(conv(), held, "v_prediction").schedule is held


def test_an_objective_argument_that_differs_from_the_schedules_is_refused():
    schedule = NoiseSchedule(20, prediction_type="v_prediction", min_snr_gamma=3.0)
    for kwargs, named in (
        ({"prediction_type": "sample"}, "schedule.prediction_type='v_prediction'"),
        ({"min_snr_gamma": 4.0}, "schedule.min_snr_gamma=3.0"),
    ):
        with pytest.raises(ValueError) as error:
            DiffusionModel(conv(), schedule, **kwargs)
        name, value = next(iter(kwargs.items()))
        assert f"`{name}`" in str(error.value)
        assert f"{name}={value!r}" in str(error.value) and named in str(error.value)


def test_a_config_of_earlier_releases_moves_the_objective_onto_the_schedule():
    # Releases before the schedule held the objective wrote it in the
    # model's config, and the schedule's config without it.
    config = DiffusionModel(conv(), NoiseSchedule(20), ema_decay=None).get_config()
    for name in ("prediction_type", "loss_weighting", "min_snr_gamma"):
        del config["schedule"]["config"][name]
    config.update(prediction_type="sample", loss_weighting="min_snr", min_snr_gamma=3.0)
    loaded = DiffusionModel.from_config(config)
    held = loaded.schedule
    assert (held.prediction_type, held.loss_weighting, held.min_snr_gamma) == (
        "sample",
        "min_snr",
        3.0,
    )
    assert "prediction_type" not in loaded.get_config()


class LabelCounter(keras.layers.Layer):
    """Passes x through and adds the labels of each call to per-class counts."""

    def __init__(self, num_bins, **kwargs):
        super().__init__(**kwargs)
        self.num_bins = num_bins
        self.counts = self.add_weight(
            shape=(num_bins,), initializer="zeros", trainable=False, name="counts"
        )

    def call(self, x, labels):
        self.counts.assign_add(ops.sum(ops.one_hot(labels, self.num_bins), axis=0))
        return x


def label_counting_denoiser(num_classes):
    """A 1x1 conv denoiser whose LabelCounter sees the labels it is given."""
    x_in = keras.Input((8, 8, 1))
    t_in = keras.Input(())
    y_in = keras.Input((), dtype="int32")
    x = LabelCounter(num_classes + 1, name="label_counter")(x_in, y_in)
    out = keras.layers.Conv2D(1, 1)(x)
    return keras.Model([x_in, t_in, y_in], out)


@pytest.mark.parametrize("class_dropout", [0.0, 0.2, 0.5])
def test_class_dropout_replaces_that_share_of_labels_in_training(class_dropout):
    num_classes, per_class, epochs = 3, 512, 3
    labels = np.arange(num_classes * per_class) % num_classes
    images = np.zeros((len(labels), 8, 8, 1), "float32")
    model = DiffusionModel(
        label_counting_denoiser(num_classes),
        NoiseSchedule(100),
        num_classes=num_classes,
        class_dropout=class_dropout,
        ema_decay=None,
    )
    model.compile(optimizer="sgd", jit_compile=False)
    counter = model.denoiser.get_layer("label_counter")

    model.fit(images, labels, epochs=epochs, batch_size=256, verbose=0)
    counts = counter.counts.numpy()
    seen = epochs * per_class  # labels of each class the denoiser was given
    assert counts.sum() == num_classes * seen
    # Each label is replaced by the null class (id num_classes) with
    # probability class_dropout, independently: binomial counts, 4.5 sigma.
    # At class_dropout=0 the tolerance is 0: no label may change.
    dropped_share = 1.0 - counts[:num_classes] / seen
    tolerance = 4.5 * np.sqrt(class_dropout * (1 - class_dropout) / seen)
    np.testing.assert_allclose(
        dropped_share, class_dropout, rtol=0, atol=tolerance, err_msg="dropped"
    )

    # Not in evaluation (training=False): every label reaches the denoiser.
    counter.counts.assign(np.zeros(num_classes + 1, "float32"))
    model.evaluate(images, labels, batch_size=256, verbose=0)
    np.testing.assert_array_equal(
        counter.counts.numpy(), [per_class] * num_classes + [0]
    )


def test_conditional_unet_trains_and_samples_with_guidance(make_unet, toy_images):
    # One level: the labels enter every level alike, and the trace is shorter.
    unet = make_unet(num_classes=3, widths=(4,))
    model = DiffusionModel(unet, NoiseSchedule(100, "cosine"), class_dropout=0.2)
    # Graph mode: XLA and "auto" have their own tests (xla_test, jit_choice_test).
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    labels = np.arange(64) % 3
    history = model.fit(toy_images, labels, epochs=2, batch_size=16, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    images = model.generate(3, labels=[0, 1, 2], guidance_scale=2.0, seed=0)
    assert images.shape == (3, 8, 8, 1)


@pytest.fixture(scope="module")
def trained_conv():
    """One conv model trained two epochs on the toy data (EMA decay 0.99), for
    the tests that only read a trained model: each `fit` of a new model
    traces a new train step, the bulk of these tests' time. A test that
    changes it puts back what it changed."""
    keras.utils.set_random_seed(1234)
    model = make_model(conv, ema_decay=0.99)
    model.fit(make_toy_images(), epochs=2, batch_size=16, verbose=0)
    return model


def test_generate_is_seeded(trained_conv):
    model = trained_conv
    sampler = DDIMSampler(num_steps=5)
    a = model.generate(5, sampler=sampler, seed=3, batch_size=2, verbose=0)
    b = model.generate(5, sampler=sampler, seed=3, verbose=0)
    c = model.generate(5, sampler=sampler, seed=4, verbose=0)
    assert a.dtype == np.float32 and a.shape == (5, 8, 8, 1)
    np.testing.assert_allclose(a[:2], b[:2], atol=1e-5)
    assert not np.allclose(b, c)


def constant_x0_denoiser(x0):
    """Predicts x0 whatever its input, while its (trainable) conv is zero."""
    x_in = keras.Input(x0.shape)
    t_in = keras.Input(())
    h = keras.layers.Conv2D(x0.shape[-1], 1, kernel_initializer="zeros")(x_in)
    out = keras.layers.Lambda(lambda h: h + x0)(h)
    return keras.Model([x_in, t_in], out)


def test_generate_clips_the_sample_to_the_image_range():
    # Deterministic DDIM ends on alphas_cumprod = 1, so its raw sample is
    # exactly the predicted x0: a ramp over [-2, 2], half of it out of range.
    ramp = np.linspace(-2.0, 2.0, 64, dtype="float32").reshape(8, 8, 1)
    model = DiffusionModel(
        constant_x0_denoiser(ramp),
        NoiseSchedule(100, "cosine"),
        prediction_type="sample",
        ema_decay=None,
    )
    images = model.generate(3, sampler=DDIMSampler(num_steps=4), seed=0, verbose=0)
    expected = np.broadcast_to(np.clip(ramp, -1.0, 1.0), images.shape)
    np.testing.assert_allclose(images, expected, atol=1e-5)


def test_generate_uses_ema_weights_by_default(trained_conv):
    model = trained_conv
    sampler = DDIMSampler(num_steps=3)
    ema = model.generate(2, sampler=sampler, seed=1)
    live = model.generate(2, sampler=sampler, seed=1, use_ema=False)
    assert not np.allclose(ema, live)
    variables = model.denoiser.trainable_variables
    trained = [v.numpy() for v in variables]
    model.ema.copy_to(variables)
    try:
        np.testing.assert_allclose(
            model.generate(2, sampler=sampler, seed=1, use_ema=False), ema, atol=1e-5
        )
    finally:  # the shared model keeps its trained weights
        for variable, value in zip(variables, trained, strict=True):
            variable.assign(value)


def test_save_and_load_round_trip(toy_images, tmp_path):
    # A conv denoiser: the state restored (EMA, optimizer, seed) is the
    # model's; a saved U-Net loads in tests/models/legacy_files_test.py and
    # tests/utils/model_file_test.py.
    model = make_model(conv, prediction_type="v_prediction")
    model.fit(toy_images, epochs=1, batch_size=16, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe_mode on, no custom_objects

    assert isinstance(loaded, DiffusionModel)
    assert loaded.schedule.prediction_type == "v_prediction"
    for a, b in zip(loaded.ema.shadows, model.ema.shadows, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    sampler = DDIMSampler(num_steps=4)
    np.testing.assert_allclose(
        loaded.generate(3, sampler=sampler, seed=5),
        model.generate(3, sampler=sampler, seed=5),
        atol=1e-6,
    )
    steps = len(toy_images) // 16
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) == steps
    np.testing.assert_array_equal(
        loaded.seed_generator.state.numpy(), model.seed_generator.state.numpy()
    )
    # The restored optimizer continues: both take the same next step.
    model.fit(toy_images[:16], epochs=1, batch_size=16, verbose=0, shuffle=False)
    loaded.fit(toy_images[:16], epochs=1, batch_size=16, verbose=0, shuffle=False)
    for a, b in zip(
        loaded.denoiser.trainable_variables,
        model.denoiser.trainable_variables,
        strict=True,
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


# (id, build(make_unet), error, message fragment)
BAD_MODEL_CASES = [
    (
        "prediction_type",
        lambda make_unet: DiffusionModel(make_unet(), prediction_type="eps"),
        ValueError,
        "prediction_type='eps'",
    ),
    (
        "loss_weighting",
        lambda make_unet: DiffusionModel(make_unet(), loss_weighting="snr"),
        ValueError,
        "loss_weighting='snr'",
    ),
    (
        "ema_decay",
        lambda make_unet: DiffusionModel(make_unet(), ema_decay=1.0),
        ValueError,
        "ema_decay=1.0",
    ),
    (
        "schedule",
        lambda make_unet: DiffusionModel(make_unet(), schedule="linear"),
        TypeError,
        "schedule='linear'",
    ),
    (
        "denoiser",
        lambda make_unet: DiffusionModel("unet"),
        TypeError,
        "denoiser='unet'",
    ),
    (
        "num_classes of an unconditional denoiser",
        lambda make_unet: DiffusionModel(make_unet(), num_classes=10),
        ValueError,
        "num_classes=10",
    ),
    (
        "class_dropout of an unconditional denoiser",
        lambda make_unet: DiffusionModel(make_unet(), class_dropout=0.1),
        ValueError,
        "class_dropout=0.1",
    ),
    (
        "fit a conditional model on images only",
        lambda make_unet: DiffusionModel(make_unet(num_classes=2)).fit(
            np.zeros((4, 8, 8, 1))
        ),
        ValueError,
        "images only",
    ),
]


@pytest.mark.parametrize(
    "build, error, fragment",
    [pytest.param(*case[1:], id=case[0]) for case in BAD_MODEL_CASES],
)
def test_bad_constructor_arguments(make_unet, build, error, fragment):
    with pytest.raises(error, match=fragment):
        build(make_unet)


@pytest.mark.parametrize(
    "data, error, fragment",
    [
        (np.zeros((4, 8, 8, 1), "uint8"), TypeError, "dtype uint8"),
        (np.full((4, 8, 8, 1), 255.0, "float32"), ValueError, r"\[-1, 1\]"),
        (np.zeros((4, 16, 16, 1), "float32"), ValueError, r"shape \(4, 16, 16, 1\)"),
        (np.zeros((4, 8, 8, 3), "float32"), ValueError, r"shape \(4, 8, 8, 3\)"),
        (np.zeros((0, 8, 8, 1), "float32"), ValueError, "empty"),
    ],
)
def test_bad_images_are_refused_before_training(make_unet, data, error, fragment):
    model = make_model(make_unet)
    weights = [v.numpy() for v in model.weights]
    with pytest.raises(error, match=fragment):
        model.fit(data, epochs=1, verbose=0)
    for before, after in zip(weights, model.weights, strict=True):
        np.testing.assert_array_equal(before, after.numpy())


@pytest.mark.parametrize(
    "data, error",
    [
        (np.zeros((4, 8, 8, 1), "uint8"), TypeError),
        (np.zeros((4, 16, 16, 1), "float32"), ValueError),
        (np.zeros((0, 8, 8, 1), "float32"), ValueError),
    ],
)
def test_bad_datasets_are_refused_before_training(make_unet, data, error):
    model = make_model(make_unet)
    dataset = tf.data.Dataset.from_tensor_slices(data).batch(2)
    with pytest.raises(error):
        model.fit(dataset, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 0


def test_labels_for_an_unconditional_model_are_refused(make_unet, toy_images):
    model = make_model(make_unet)
    with pytest.raises(ValueError, match="unconditional"):
        model.fit(toy_images, np.zeros(64, "int32"), epochs=1, verbose=0)
    with pytest.raises(ValueError, match="labels=0"):
        model.generate(1, labels=0)
    with pytest.raises(ValueError, match="guidance_scale=3.0"):
        model.generate(1, guidance_scale=3.0)
    with pytest.raises(ValueError, match="num_images"):
        model.generate(0)


def test_conditional_label_checks(make_unet, toy_images):
    model = DiffusionModel(make_unet(num_classes=3), NoiseSchedule(100, "cosine"))
    model.compile()
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        model.fit(toy_images, np.full(64, 3), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        model.generate(2, labels=[0, 5])
    with pytest.raises(ValueError, match="length"):
        model.generate(2, labels=[0, 1, 2])


def label_echo_denoiser(num_classes):
    """Predicts x0 = (label / num_classes) everywhere: samples show the label."""
    x_in = keras.Input((4, 4, 1))
    t_in = keras.Input(())
    y_in = keras.Input((), dtype="int32")
    level = keras.layers.Lambda(
        lambda y: ops.cast(y, "float32")[:, None, None, None] / num_classes
    )(y_in)
    out = keras.layers.Lambda(lambda a: a[0] * 0.0 + a[1])([x_in, level])
    return keras.Model([x_in, t_in, y_in], out)


def test_generate_without_labels_samples_every_class(make_unet):
    model = DiffusionModel(
        label_echo_denoiser(4),
        NoiseSchedule(100, "cosine"),
        prediction_type="sample",
        num_classes=4,
    )
    sampler = DDIMSampler(num_steps=4)
    images = model.generate(200, sampler=sampler, seed=5, verbose=0)
    labels = np.round(images.mean(axis=(1, 2, 3)) * 4).astype(int)
    np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), labels / 4, atol=1e-4)
    counts = np.bincount(labels, minlength=5)
    assert counts[4] == 0  # never the null class
    assert counts[:4].min() >= 30  # each of the 4 classes, about 50 each
    again = model.generate(200, sampler=sampler, seed=5, verbose=0)
    np.testing.assert_array_equal(images, again)
    guided = model.generate(8, sampler=sampler, seed=5, guidance_scale=3.0)
    assert guided.shape == (8, 4, 4, 1)
    null = model.generate(6, sampler=sampler, labels="unconditional", seed=5)
    np.testing.assert_allclose(null, 1.0, atol=1e-4)  # the null class id is 4
    with pytest.raises(ValueError, match="guidance_scale=2"):
        model.generate(2, labels="unconditional", guidance_scale=2.0)
    with pytest.raises(ValueError, match="labels='null'"):
        model.generate(2, labels="null")


def test_compile_refuses_a_loss(make_unet):
    model = DiffusionModel(make_unet())
    with pytest.raises(ValueError, match="loss='mse'"):
        model.compile(loss="mse")


def test_equal_samplers_reuse_one_compiled_loop(make_unet):
    model = make_model(make_unet)
    first = model.generate(2, seed=0, verbose=0)
    second = model.generate(2, seed=0, verbose=0)  # a new default sampler
    # The default of the schedule and prediction type.
    default = default_sampler(model.schedule, model.prediction_type)
    third = model.generate(2, sampler=default, seed=0)
    np.testing.assert_allclose(first, second, atol=1e-6)
    np.testing.assert_allclose(first, third, atol=1e-6)
    (function,) = model.sampling_state.functions.values()
    assert function.experimental_get_tracing_count() == 1
    model.generate(2, sampler=DDIMSampler(num_steps=5), seed=0)
    assert len(model.sampling_state.functions) == 2
