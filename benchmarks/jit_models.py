"""XLA or graph mode, per denoiser: what `jit_compile="auto"` measures.

    python -m benchmarks.jit_models                 # every model, a process each
    python -m benchmarks.jit_models tiny-unet-32    # one

For each model, in a fresh process, `keras_diffusion.trainers.jit_choice.choose`
times the train step (Adam, EMA) in graph mode and with XLA on one batch, as
the first `fit` of a model compiled with `jit_compile="auto"` does for a run
of unknown length, and prints what it found: the first call of each form
(trace, or XLA compilation, and one call) and each one's time a step. The
table in docs/why-slow.md ("XLA or graph mode") comes from it.
"""

import json
import sys

from benchmarks.workers import run_worker

# name: (what, image size, channels, batch)
MODELS = {
    "tiny-unet-32": ("U-Net, --model-size tiny, 32x32 RGB", 32, 3, 32),
    "small-unet-32": ("U-Net, --model-size small, 32x32 RGB", 32, 3, 32),
    "base-unet-16": ("U-Net, --model-size base, 16x16 RGB", 16, 3, 16),
    "large-unet-16": ("U-Net, --model-size large, 16x16 RGB", 16, 3, 8),
    "digits-unet": ("the digits preset U-Net, 16x16x1", 16, 1, 64),
    "attention-unet": ("U-Net, attention at 16x16 and 8x8, width 16, 32x32", 32, 1, 32),
    "plain-conv": ("four 3x3 convolutions of 32, 32x32x1", 32, 1, 32),
    "tiny-conv": ("two 3x3 convolutions of 8, 16x16x1", 16, 1, 32),
}


def _denoiser(name):
    import keras

    from keras_diffusion import UNet, data
    from keras_diffusion.models import unet_sizes

    _, size, channels, _ = MODELS[name]
    if name.endswith("-unet-32") or name.endswith("-unet-16"):
        model_size = name.split("-")[0]
        settings = unet_sizes.unet_settings(model_size, size)
        return UNet((size, size, channels), **settings)
    if name == "digits-unet":
        return UNet((size, size, channels), **data.get_preset("digits").model)
    if name == "attention-unet":
        return UNet(
            (size, size, channels),
            widths=(16, 32, 32),
            attention_levels=(False, True, True),
        )
    depth, width = (4, 32) if name == "plain-conv" else (2, 8)
    x_in, t_in = keras.Input((size, size, channels)), keras.Input(())
    shift = keras.layers.Dense(1)(keras.layers.Reshape((1,))(t_in))
    h = x_in + keras.layers.Reshape((1, 1, 1))(shift)
    for _ in range(depth):
        h = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(h)
    return keras.Model(
        [x_in, t_in], keras.layers.Conv2D(channels, 3, padding="same")(h)
    )


def measure(name):
    """`jit_choice.choose` on the model `name`: a dict of its findings."""
    import numpy as np

    from keras_diffusion import DiffusionModel, NoiseSchedule
    from keras_diffusion.trainers import execution, jit_choice

    what, size, channels, batch_size = MODELS[name]
    denoiser = _denoiser(name)
    model = DiffusionModel(denoiser, NoiseSchedule(1000, "cosine"), seed=0)
    model.compile(optimizer="adam")
    batch = np.random.default_rng(0).uniform(-1, 1, (batch_size, size, size, channels))
    choice = jit_choice.choose(
        model,
        batch.astype("float32"),
        None,  # a run of unknown length: both forms are timed
        lambda xla, step_seconds: execution.auto_steps_per_execution(
            None, xla=xla, step_seconds=step_seconds
        ),
        fixed_batch=True,
    )
    return {
        "model": what,
        "parameters": int(denoiser.count_params()),
        "batch_size": batch_size,
        "kept": "XLA" if choice.jit_compile else "graph mode",
        "graph_step_ms": 1000 * choice.graph_step,
        "xla_step_ms": 1000 * choice.xla_step if choice.xla_step else None,
        "graph_first_call_s": choice.graph_first_call,
        "xla_first_call_s": choice.xla_first_call,
    }


def main(argv):
    if argv[:1] == ["worker"]:
        print(json.dumps(measure(argv[1])), flush=True)
        return
    names = argv or list(MODELS)
    print(
        f"{'model':16s} {'params':>8s} {'batch':>5s} {'graph ms':>9s} {'XLA ms':>8s} "
        f"{'graph/XLA':>9s} {'graph 1st s':>11s} {'XLA 1st s':>9s} {'ratio':>6s}  kept"
    )
    for name in names:
        r = run_worker("benchmarks.jit_models", "worker", name)
        xla = r["xla_step_ms"]
        speedup = r["graph_step_ms"] / xla if xla else float("nan")
        first = r["xla_first_call_s"] or float("nan")
        print(
            f"{name:16s} {r['parameters'] / 1e6:7.2f}M {r['batch_size']:5d} "
            f"{r['graph_step_ms']:9.1f} {xla or float('nan'):8.1f} {speedup:9.2f} "
            f"{r['graph_first_call_s']:11.1f} {first:9.1f} "
            f"{first / r['graph_first_call_s']:6.1f}  {r['kept']}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
