"""Distribution scenarios, each process set up before TensorFlow starts.

Logical devices and multi-worker strategies must be configured before
TensorFlow initialises its devices, which another test module may already have
done in the pytest process; `distribute_test.py` runs this file instead:

    python worker.py mirrored OUT.json [SCENARIO ...]  # two logical CPUs
    python worker.py multiworker OUT.npz [FOLDER CACHE] # one worker of TF_CONFIG

The mirrored run writes `{scenario: {"ok": bool, "error": str}}` after each
scenario, so a crash keeps the results of those before it.
"""

import json
import os
import sys
import tempfile
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

from keras_diffusion import (  # noqa: E402
    DDIMSampler,
    DiffusionModel,
    EDMSchedule,
    FlowMatchSchedule,
    HeunSampler,
    NoiseSchedule,
)
from keras_diffusion.distribute.strategy import make_strategy  # noqa: E402

IMAGE_SHAPE = (8, 8, 1)
GLOBAL_BATCH = 8
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


class ExampleNoiseSchedule(NoiseSchedule):
    """Noises an example by a fixed function of itself, whatever the draw.

    With `prediction_type="sample"` and a denoiser blind to `t`, the loss of an
    example no longer depends on which replica drew its noise, so a
    distributed update can be compared with a single-device one.
    """

    def add_noise(self, x0, noise, t):
        return 0.9 * x0 + 0.3 * ops.sin(5.0 * x0 + 1.0)


def toy_denoiser(image_shape=IMAGE_SHAPE):
    """Two convolutions; `t` enters through a frozen zero kernel."""
    x_in = keras.Input(image_shape)
    t_in = keras.Input(())
    t_features = keras.layers.Dense(
        4, use_bias=False, kernel_initializer="zeros", trainable=False
    )(keras.layers.Reshape((1,))(t_in))
    h = keras.layers.Conv2D(4, 3, padding="same", activation="tanh")(x_in)
    h = h + keras.layers.Reshape((1, 1, 4))(t_features)
    out = keras.layers.Conv2D(image_shape[-1], 3, padding="same")(h)
    return keras.Model([x_in, t_in], out)


@keras.saving.register_keras_serializable(package="distribute_worker")
class SubclassedToy(keras.Model):
    """`toy_denoiser` as a subclassed model, unbuilt until its first call.

    Seeded initializers give it the same weights in every model made.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

        def init(seed):
            return keras.initializers.RandomNormal(0.0, 0.3, seed=seed)

        self.t_features = keras.layers.Dense(
            4, use_bias=False, kernel_initializer="zeros", trainable=False
        )
        self.conv_in = keras.layers.Conv2D(
            4,
            3,
            padding="same",
            activation="tanh",
            kernel_initializer=init(1),
            bias_initializer=init(2),
        )
        self.conv_out = keras.layers.Conv2D(
            IMAGE_SHAPE[-1],
            3,
            padding="same",
            kernel_initializer=init(3),
            bias_initializer=init(4),
        )

    def call(self, inputs):
        x, t = inputs
        t_features = self.t_features(ops.reshape(t, (-1, 1)))
        return self.conv_out(self.conv_in(x) + ops.reshape(t_features, (-1, 1, 1, 4)))


def make_model(strategy, example_noise=True, optimizer=None):
    """The same tiny model, weights and optimizer in any process and strategy.

    SGD rather than Adam: Adam's update does not change when the gradient is
    scaled, so it would hide a loss multiplied by the number of replicas.
    """
    with strategy.scope():
        denoiser = toy_denoiser()
        rng = np.random.default_rng(0)
        for variable in denoiser.trainable_variables:
            variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
        model = DiffusionModel(
            denoiser,
            ExampleNoiseSchedule(50) if example_noise else NoiseSchedule(50),
            prediction_type="sample" if example_noise else "epsilon",
            ema_decay=0.9,
            seed=7,
        )
        model.compile(optimizer=optimizer or keras.optimizers.SGD(0.2))
    return model


def images(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (n, *IMAGE_SHAPE)).astype("float32")


def train(model, x, batch_size=GLOBAL_BATCH, epochs=2):
    history = model.fit(
        x, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0
    )
    return trained(model, history)


def trained(model, history):
    """What a fit left: the denoiser's weights, the EMA and the losses."""
    return {
        "weights": [np.asarray(w) for w in model.denoiser.get_weights()],
        "ema": [np.asarray(v) for v in model.ema.values()],
        "loss": np.asarray(history.history["loss"]),
    }


def assert_same_training(got, want):
    for key in ("weights", "ema", "loss"):
        for a, b in zip(got[key], want[key], strict=True):
            np.testing.assert_allclose(a, b, err_msg=key, **TOLERANCE)


def local_values(strategy, variable):
    return [np.asarray(v) for v in strategy.experimental_local_results(variable)]


# Scenarios on two logical CPUs.


def scenario_parity(strategy):
    """Same global batch and per-example noise: same weights, EMA and loss."""
    x = images(16)
    single = make_model(tf.distribute.get_strategy())
    initial = [np.asarray(w) for w in single.denoiser.get_weights()]
    want = train(single, x)
    model = make_model(strategy)
    got = train(model, x)
    moved = max(
        np.abs(a - b).max() for a, b in zip(want["weights"], initial, strict=True)
    )
    assert moved > 1e-3, f"training barely moved the weights ({moved})"
    assert_same_training(got, want)
    # The EMA shadows and step counter agree on every replica.
    for shadow in model.ema.shadows:
        first, second = local_values(strategy, shadow.value)
        np.testing.assert_array_equal(first, second)
    counts = local_values(strategy, model.ema.num_updates.value)
    assert [int(c) for c in counts] == [4, 4], counts


def scenario_uneven(strategy):
    """11 images, batch 5: split 3+2, 3+2, then 1 and an empty batch."""
    x = images(11, seed=1)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(5)
    splits = [
        [int(v.shape[0]) for v in strategy.experimental_local_results(batch)]
        for batch in strategy.experimental_distribute_dataset(dataset)
    ]
    assert splits == [[3, 2], [3, 2], [1, 0]], splits
    want = train(make_model(tf.distribute.get_strategy()), x, batch_size=5)
    got = train(make_model(strategy), x, batch_size=5)
    assert_same_training(got, want)


def scenario_replica_noise(strategy):
    """Replicas draw their own t and noise; a seed reproduces a run."""
    model = make_model(strategy, example_noise=False)
    x = tf.constant(images(4))

    @tf.function
    def losses():
        def step():
            seed = model._replica_seed()
            return model.diffusion_loss(x, seed=seed), seed

        return strategy.run(step)

    first_loss, first_seed = losses()
    loss = [float(v) for v in strategy.experimental_local_results(first_loss)]
    seeds = [
        tuple(np.asarray(v)) for v in strategy.experimental_local_results(first_seed)
    ]
    assert seeds[0] != seeds[1], seeds
    # Same images and weights on both replicas: different losses mean
    # different timesteps and noise.
    assert abs(loss[0] - loss[1]) > 1e-4, loss
    model.seed_generator.state.assign([7, 0])
    again = [float(v) for v in strategy.experimental_local_results(losses()[0])]
    np.testing.assert_array_equal(again, loss)

    # Two runs with the same seed train to the same weights.
    runs = [train(make_model(strategy, example_noise=False), images(8), 4, 1)]
    runs.append(train(make_model(strategy, example_noise=False), images(8), 4, 1))
    assert_same_training(runs[1], runs[0])


def scenario_save_load(strategy):
    """Save, load and generate under the strategy; fit continues."""
    model = make_model(strategy, example_noise=False)
    model.fit(images(8), batch_size=4, epochs=1, verbose=0)
    sampler = DDIMSampler(num_steps=4)
    expected = model.generate(4, sampler=sampler, seed=0)
    assert expected.shape == (4, *IMAGE_SHAPE) and np.isfinite(expected).all()
    with strategy.scope():
        np.testing.assert_allclose(
            model.generate(4, sampler=sampler, seed=0), expected, atol=1e-5
        )
    path = os.path.join(tempfile.mkdtemp(), "model.keras")
    model.save(path)
    with strategy.scope():
        loaded = keras.saving.load_model(path)
    assert loaded.distribute_strategy is strategy
    np.testing.assert_allclose(
        loaded.generate(4, sampler=sampler, seed=0), expected, atol=1e-5
    )
    history = loaded.fit(images(8), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert int(local_values(strategy, loaded.ema.num_updates.value)[1]) == 4
    plain = keras.saving.load_model(path)
    np.testing.assert_allclose(
        plain.generate(4, sampler=sampler, seed=0), expected, atol=1e-5
    )


def scenario_scope_errors(strategy):
    """A model or denoiser built outside the scope fails at fit, clearly."""
    x = images(8)
    outside = make_model(tf.distribute.get_strategy())
    try:
        with strategy.scope():
            outside.fit(x, batch_size=4, verbose=0)
    except ValueError as error:
        assert "not created under the scope of the MirroredStrategy" in str(error)
    else:
        raise AssertionError("fit accepted a model built outside the scope")
    denoiser = toy_denoiser()
    with strategy.scope():
        model = DiffusionModel(denoiser, NoiseSchedule(50))
        model.compile(optimizer="sgd")
    try:
        model.fit(x, batch_size=4, verbose=0)
    except ValueError as error:
        assert "strategy.scope()" in str(error), error
    else:
        raise AssertionError("fit accepted a denoiser built outside the scope")


def scenario_subclassed(strategy):
    """An unbuilt subclassed denoiser, built by DiffusionModel in the scope:
    trains as on one device, its EMA mirrored, and round-trips."""

    def make(strategy):
        with strategy.scope():
            model = DiffusionModel(
                SubclassedToy(),
                ExampleNoiseSchedule(50),
                prediction_type="sample",
                image_shape=IMAGE_SHAPE,
                ema_decay=0.9,
                seed=7,
            )
            model.compile(optimizer=keras.optimizers.SGD(0.2))
        return model

    x = images(16)
    want = train(make(tf.distribute.get_strategy()), x)
    model = make(strategy)
    assert len(model.ema.shadows) == len(model.denoiser.trainable_variables) == 4
    assert_same_training(train(model, x), want)
    for shadow in model.ema.shadows:
        first, second = local_values(strategy, shadow.value)
        np.testing.assert_array_equal(first, second)
    sampler = DDIMSampler(num_steps=4)
    expected = model.generate(4, sampler=sampler, seed=0)
    path = os.path.join(tempfile.mkdtemp(), "subclassed.keras")
    model.save(path)
    with strategy.scope():
        loaded = keras.saving.load_model(
            path, custom_objects={"ExampleNoiseSchedule": ExampleNoiseSchedule}
        )
    np.testing.assert_allclose(
        loaded.generate(4, sampler=sampler, seed=0), expected, atol=1e-5
    )
    loaded.fit(images(8), batch_size=4, epochs=1, verbose=0)


def scenario_edm(strategy):
    """EDM and flow-matching training under the strategy: replicas draw their
    own noise levels, the EMA stays mirrored, and save, load and generate
    agree."""
    for schedule in (EDMSchedule(), FlowMatchSchedule(shift=3.0)):
        _noise_level_scenario(strategy, schedule)


def _noise_level_scenario(strategy, schedule):
    def make():
        with strategy.scope():
            denoiser = toy_denoiser()
            rng = np.random.default_rng(0)
            for variable in denoiser.trainable_variables:
                variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
            model = DiffusionModel(denoiser, schedule, ema_decay=0.9, seed=7)
            model.compile(optimizer=keras.optimizers.SGD(0.05))
        return model

    # Two runs from one seed train alike.
    model = make()
    runs = [train(model, images(16)), train(make(), images(16))]
    assert np.isfinite(runs[0]["loss"]).all(), runs[0]["loss"]
    assert_same_training(runs[1], runs[0])
    x = tf.constant(images(4))

    @tf.function
    def losses():
        return strategy.run(lambda: model.diffusion_loss(x, seed=model._replica_seed()))

    # Same images and weights on both replicas: other sigmas and noise.
    loss = [float(v) for v in strategy.experimental_local_results(losses())]
    assert abs(loss[0] - loss[1]) > 1e-4, loss
    for shadow in model.ema.shadows:
        first, second = local_values(strategy, shadow.value)
        np.testing.assert_array_equal(first, second)
    sampler = HeunSampler(num_steps=3)
    expected = model.generate(4, sampler=sampler, seed=0)
    path = os.path.join(tempfile.mkdtemp(), "edm.keras")
    model.save(path)
    with strategy.scope():
        loaded = keras.saving.load_model(path)
    assert loaded.schedule.get_config() == schedule.get_config()
    np.testing.assert_allclose(
        loaded.generate(4, sampler=sampler, seed=0), expected, atol=1e-5
    )


def scenario_text(strategy):
    """A text model (tokenizer and encoder) fits a step of (images, captions)
    under the strategy, the encoder's weights and EMA mirrored; it samples
    from prompts."""
    from keras_diffusion import TextConditioning
    from tests.denoisers import conv_denoiser

    captions = ["red heart", "cat face", "green heart", "cat"] * 2
    with strategy.scope():
        text = TextConditioning(4, 32, width=8, depth=1, heads=2)
        text.adapt(captions)
        model = DiffusionModel(
            conv_denoiser(context_shape=(4, 8)), conditioning=text, seed=0
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    before = [v.numpy() for v in text.trainable_variables]
    data = tf.data.Dataset.from_tensor_slices((images(8), captions)).batch(8)
    history = model.fit(data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for old, variable in zip(before, text.trainable_variables, strict=True):
        assert not np.allclose(old, variable.numpy())
        first, second = local_values(strategy, variable.value)
        np.testing.assert_allclose(first, second, **TOLERANCE)
    samples = model.generate(2, prompts="red heart", guidance_scale=2.0, seed=0)
    assert samples.shape == (2, *IMAGE_SHAPE) and np.isfinite(samples).all()


SCENARIOS = {
    "parity": scenario_parity,
    "uneven": scenario_uneven,
    "replica_noise": scenario_replica_noise,
    "save_load": scenario_save_load,
    "scope_errors": scenario_scope_errors,
    "subclassed": scenario_subclassed,
    "edm": scenario_edm,
    "text": scenario_text,
}


def run_mirrored(out, names):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    keras.config.disable_interactive_logging()
    results = {}
    for name in names or SCENARIOS:
        try:
            SCENARIOS[name](strategy)
            results[name] = {"ok": True, "error": ""}
        except Exception:  # noqa: BLE001 - reported to the test
            results[name] = {"ok": False, "error": traceback.format_exc()}
        with open(out, "w") as f:
            json.dump(results, f)


CACHE_BATCH = 6


def cached_folder(folder, cache):
    """The image folder's batches, read from its (built) decode cache."""
    from keras_diffusion.data import from_directory

    return from_directory(
        folder, CACHE_BATCH, IMAGE_SHAPE[:2], channels=1, cache=cache, seed=3, flip=True
    )


def train_ordered(model, dataset, epochs=2):
    """`train`'s fit of epoch-ordered batches (as `keras_diffusion.train`)."""
    from keras_diffusion.data.ordered import EpochOrder

    order = EpochOrder(3)
    history = model.fit(
        dataset.epoch_batches(order),
        epochs=epochs,
        callbacks=[order.callback()],
        verbose=0,
    )
    return trained(model, history)


def _flat(prefix, result):
    return {
        f"{prefix}loss": result["loss"],
        **{f"{prefix}weights_{i}": w for i, w in enumerate(result["weights"])},
        **{f"{prefix}ema_{i}": w for i, w in enumerate(result["ema"])},
    }


def run_worker(out, folder=None, cache=None):
    """One worker of the `TF_CONFIG` cluster; every worker writes its result:
    a fit of arrays, and with `folder` a fit of its decode cache's
    epoch-ordered batches, with the cache positions this worker read."""
    from keras_diffusion.data.cache import DecodeCache

    strategy = make_strategy("multiworker")
    keras.config.disable_interactive_logging()
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    results = _flat("", train(make_model(strategy), images(16)))
    if folder is not None:
        read, gather = [], DecodeCache.gather

        def recorded(self, rows):
            read.append(np.asarray(rows))
            return gather(self, rows)

        DecodeCache.gather = recorded
        dataset = cached_folder(folder, cache)
        model = make_model(strategy)
        results.update(_flat("cache_", train_ordered(model, dataset)))
        # An epoch's steps, not one more (an empty step would move the EMA).
        results["cache_steps"] = np.asarray(model.optimizer.iterations.numpy())
        results["cache_read"] = np.concatenate(read)
    np.savez(out, **results)


if __name__ == "__main__":
    mode, out, *rest = sys.argv[1:]
    if mode == "mirrored":
        run_mirrored(out, rest)
    elif mode == "multiworker":
        run_worker(out, *rest)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
