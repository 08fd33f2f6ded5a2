"""Per-epoch step times, as distributions: is this machine's training bimodal?

`scripts/benchmark.py --distribution` runs each case for a number of epochs
in several fresh processes (one at a time, so they never share the cores),
drops each process's first epoch (tracing and compilation), and reports the
mean step time of every other epoch, measured from one epoch's end to the
next, so that whatever runs between epochs counts.

A result is bimodal as `benchmarks.distribution_report` decides. On the
2-core CPU of docs/why-slow.md, TensorFlow's default tf.data options made
about half of all epochs 1.7x as long; this is the check that finds it.

Cases (the plain convolutional denoiser of `conv`, or a U-Net of
`benchmarks.config.MODELS` for the `fit*` and `torch` cases):

  bare                a `@tf.function` step over `tf.data`, TensorFlow's defaults
  bare-no-autotune    the same, `options.autotune.enabled = False`
  keras               `keras.Model.fit` (MSE to the noise), TensorFlow's defaults
  keras-no-autotune   the same, autotuning off
  fit                 `DiffusionModel.fit` on a plain `tf.data` pipeline
  fit-autotune        the same with `options.autotune.enabled = True`: the
                      user's explicit choice, kept (the behaviour before
                      `fit` turned autotuning off)
  torch               PyTorch: a `DataLoader` loop on `conv`, the diffusers
                      peer (`benchmarks.peer.TorchTrainer`) on a U-Net
"""

import json
import sys
import time

import numpy as np

from benchmarks.distribution_report import CASES, UNET_CASES, summarize
from benchmarks.workers import run_worker

# The plain convolutional denoiser: 32x32x1, four 3x3 convolutions of 32.
CONV = {"size": 32, "width": 32, "depth": 4, "batch_size": 32, "steps": 32}


def run_distribution(cases, model, epochs, processes, log):
    """Each case's per-epoch step times over `processes` fresh processes.

    The processes alternate between the cases (case 1, case 2, ..., case 1,
    ...), so that a drift of the machine spreads over all of them.
    """
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise ValueError(f"Unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if model != "conv":
        wrong = [c for c in cases if c not in UNET_CASES]
        if wrong:
            raise ValueError(
                f"On a U-Net ({model!r}) only {', '.join(UNET_CASES)} run. "
                f"Received: {wrong}"
            )
    results = {case: {"epoch_seconds": [], "first_epoch_s": []} for case in cases}
    for p in range(processes):
        for case in cases:
            out = run_worker(
                "benchmarks.distribution", "worker", case, model, str(epochs)
            )
            results[case]["epoch_seconds"] += out["epoch_seconds"]
            results[case]["first_epoch_s"].append(out["first_epoch_s"])
            s = summarize(out["epoch_seconds"])
            log(
                f"  process {p + 1}/{processes} {case}: {s['slow_epochs']} of "
                f"{s['epochs']} epochs slow, median {1000 * s['all_median']:.1f} ms"
            )
    for result in results.values():
        result["summary"] = summarize(result["epoch_seconds"])
    return results


# The worker: one case, one process.


def _conv_data():
    rng = np.random.default_rng(0)
    n = CONV["batch_size"] * CONV["steps"]
    return rng.standard_normal((n, CONV["size"], CONV["size"], 1)).astype("float32")


def _conv_keras(with_time):
    import keras

    x_in = keras.Input((CONV["size"], CONV["size"], 1))
    h = x_in
    if with_time:
        t_in = keras.Input(())
        shift = keras.layers.Dense(1)(keras.layers.Reshape((1,))(t_in))
        h = h + keras.layers.Reshape((1, 1, 1))(shift)
    for _ in range(CONV["depth"]):
        h = keras.layers.Conv2D(CONV["width"], 3, padding="same", activation="relu")(h)
    out = keras.layers.Conv2D(1, 3, padding="same")(h)
    return keras.Model([x_in, t_in] if with_time else x_in, out)


def _with_autotune(dataset, enabled):
    import tensorflow as tf

    if enabled is None:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = enabled
    return dataset.with_options(options)


def _epoch_clock():
    """A Keras callback recording each epoch end's time."""
    import keras

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = [time.perf_counter()]

        def on_epoch_end(self, epoch, logs=None):
            self.ends.append(time.perf_counter())

    return Clock()


def _bare(epochs, autotune):
    import keras
    import tensorflow as tf

    model = _conv_keras(with_time=False)
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    dataset = tf.data.Dataset.from_tensor_slices(_conv_data())
    dataset = dataset.shuffle(len(_conv_data()), seed=0).batch(CONV["batch_size"])
    dataset = _with_autotune(dataset.prefetch(tf.data.AUTOTUNE), autotune)

    @tf.function
    def step(images):
        noise = tf.random.normal(tf.shape(images))
        with tf.GradientTape() as tape:
            out = model(images + noise, training=True)
            loss = tf.reduce_mean((out - noise) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    ends = [time.perf_counter()]
    for _ in range(epochs):
        for images in dataset:
            loss = step(images)
        float(loss)
        ends.append(time.perf_counter())
    return ends, CONV["steps"]


def _keras_fit(epochs, autotune):
    import tensorflow as tf

    model = _conv_keras(with_time=False)
    model.compile("adam", "mse")  # Keras' defaults: graph mode on a CPU
    images = _conv_data()
    noise = np.random.default_rng(1).standard_normal(images.shape).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((images + noise, noise))
    dataset = dataset.shuffle(len(images), seed=0).batch(CONV["batch_size"])
    dataset = _with_autotune(dataset.prefetch(tf.data.AUTOTUNE), autotune)
    clock = _epoch_clock()
    model.fit(dataset, epochs=epochs, verbose=0, callbacks=[clock])
    return clock.ends, CONV["steps"]


def _diffusion_fit(model, epochs, autotune):
    import tensorflow as tf

    from benchmarks.config import CPU_RUNS, build_unet, load_images
    from keras_diffusion import DiffusionModel, NoiseSchedule

    if model == "conv":
        denoiser, schedule = _conv_keras(with_time=True), NoiseSchedule(1000)
        images, batch_size = _conv_data(), CONV["batch_size"]
    else:
        denoiser, schedule = build_unet(model)
        batch_size = CPU_RUNS[model][0]
        images = load_images(denoiser.image_shape[0])
    dataset = tf.data.Dataset.from_tensor_slices(images)
    dataset = dataset.shuffle(len(images), seed=0)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    dataset = _with_autotune(dataset.prefetch(tf.data.AUTOTUNE), autotune)
    diffusion = DiffusionModel(denoiser, schedule, seed=0)
    diffusion.compile(optimizer="adam")  # the library's defaults
    clock = _epoch_clock()
    diffusion.fit(dataset, epochs=epochs, verbose=0, callbacks=[clock])
    return clock.ends, len(images) // batch_size


def _torch(model, epochs):
    import torch

    torch.manual_seed(0)
    if model != "conv":
        from benchmarks import peer
        from benchmarks.config import CPU_RUNS, EMA_DECAY, build_unet, load_images

        unet, schedule = build_unet(model)
        images = load_images(unet.image_shape[0])
        batch_size = CPU_RUNS[model][0]
        trainer = peer.TorchTrainer(
            peer.diffusers_unet(unet.get_config()),
            schedule.get_config(),
            images,
            batch_size,
            1e-3,
            EMA_DECAY,
            "cpu",
            amp=False,
        )
        steps = len(images) // batch_size
        ends = [time.perf_counter()]
        for _ in range(epochs):
            trainer.run(steps)
            ends.append(time.perf_counter())
        return ends, steps
    layers, channels = [], 1
    for _ in range(CONV["depth"]):
        layers += [torch.nn.Conv2d(channels, CONV["width"], 3, padding=1)]
        layers += [torch.nn.ReLU()]
        channels = CONV["width"]
    net = torch.nn.Sequential(*layers, torch.nn.Conv2d(channels, 1, 3, padding=1))
    optimizer = torch.optim.Adam(net.parameters(), 1e-3)
    data = torch.from_numpy(_conv_data().transpose(0, 3, 1, 2).copy())
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(data),
        batch_size=CONV["batch_size"],
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
    )
    ends = [time.perf_counter()]
    for _ in range(epochs):
        for (images,) in loader:
            noise = torch.randn_like(images)
            loss = ((net(images + noise) - noise) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        float(loss)
        ends.append(time.perf_counter())
    return ends, CONV["steps"]


def run_case(case, model, epochs):
    """One process's epochs: `{"epoch_seconds": [...], "first_epoch_s": s}`."""
    epochs = int(epochs) + 1  # the first one traces and compiles
    if case.startswith("bare"):
        ends, steps = _bare(epochs, None if case == "bare" else False)
    elif case.startswith("keras"):
        ends, steps = _keras_fit(epochs, None if case == "keras" else False)
    elif case.startswith("fit"):
        ends, steps = _diffusion_fit(
            model, epochs, True if "autotune" in case else None
        )
    else:
        ends, steps = _torch(model, epochs)
    durations = np.diff(ends)
    return {
        "epoch_seconds": [float(d / steps) for d in durations[1:]],
        "first_epoch_s": float(durations[0]),
    }


def main(argv):
    if argv[:1] != ["worker"]:
        raise SystemExit(
            "usage: python -m benchmarks.distribution worker CASE MODEL EPOCHS"
        )
    print(json.dumps(run_case(*argv[1:4])), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
