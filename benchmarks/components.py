"""The U-Net's building blocks, timed alone: where a framework's step goes.

    python scripts/benchmark.py --components

times forward + backward of each 3x3 convolution shape and each GroupNorm +
SiLU shape of the digits U-Net at batch 64 on the CPU (a GPU is not used),
in TensorFlow compiled with XLA, in TensorFlow graph mode (oneDNN kernels)
and, when installed, in torch. Each side runs in a process of its own (`python -m
benchmarks.components SIDE`), so the frameworks never share threads. A time
is the best of five rounds of `repeats` calls, in milliseconds.
"""

import json
import sys
import time

from benchmarks.workers import run_worker

# (batch, height, width, in channels, out channels): the digits U-Net's 3x3
# convolutions at batch 64, from the 16x16 level down to the 4x4 one.
CONVS = (
    (64, 16, 16, 16, 16),
    (64, 16, 16, 32, 32),
    (64, 8, 8, 32, 32),
    (64, 8, 8, 64, 64),
    (64, 4, 4, 64, 64),
)
# (batch, height, width, channels) of its GroupNorms (8 groups) + SiLU.
NORMS = tuple(shape[:4] for shape in CONVS)
GROUPS = 8
SIDES = ("keras-xla", "keras-graph", "torch")


def best_ms(call, repeats):
    """The best of five rounds of `repeats` calls of `call`, ms a call."""
    call()
    call()
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        rounds.append((time.perf_counter() - start) / repeats * 1e3)
    return min(rounds)


def keras_times(jit_compile, threads, repeats, shapes):
    """`{"conv": [ms...], "norm": [ms...]}` of TensorFlow's kernels."""
    import keras
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")  # the CPU's kernels, as torch's
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    def timed(layer, shape, activation):
        x = tf.random.normal(shape)
        layer.build(shape)

        @tf.function(jit_compile=jit_compile)
        def forward_backward(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = activation(layer(x))
                loss = tf.reduce_sum(y * y)
            return tape.gradient(loss, [x, *layer.trainable_variables])

        return best_ms(lambda: forward_backward(x)[0].numpy(), repeats)

    convs, norms = shapes
    return {
        "conv": [
            timed(keras.layers.Conv2D(c_out, 3, padding="same"), s[:4], tf.identity)
            for *s, c_out in convs
        ],
        "norm": [
            timed(keras.layers.GroupNormalization(GROUPS), s, tf.nn.silu) for s in norms
        ],
    }


def torch_times(threads, repeats, shapes):
    """The same as `keras_times`, in torch (NCHW, eager, its CPU kernels)."""
    import torch

    torch.set_num_threads(threads)

    def timed(module, shape, activation):
        b, h, w, c = shape
        x = torch.randn(b, c, h, w, requires_grad=True)

        def forward_backward():
            y = activation(module(x))
            (y * y).sum().backward()

        return best_ms(forward_backward, repeats)

    convs, norms = shapes
    silu = torch.nn.functional.silu
    return {
        "conv": [
            timed(torch.nn.Conv2d(s[3], c_out, 3, padding=1), s[:4], lambda y: y)
            for *s, c_out in convs
        ],
        "norm": [timed(torch.nn.GroupNorm(GROUPS, s[3]), s, silu) for s in norms],
    }


def side_times(side, threads, repeats, quick=False):
    """Times one side in this process."""
    shapes = (CONVS[:1], NORMS[:1]) if quick else (CONVS, NORMS)
    if side == "torch":
        return torch_times(threads, repeats, shapes)
    return keras_times(side == "keras-xla", threads, repeats, shapes)


def run_components(threads, quick=False, with_torch=True):
    """Every side in its own process; `{side: {"conv": [...], "norm": [...]}}`."""
    repeats = 2 if quick else 20
    results = {}
    for side in SIDES if with_torch else SIDES[:2]:
        args = [side, str(threads), str(repeats)] + (["quick"] if quick else [])
        results[side] = run_worker("benchmarks.components", *args)
    return results


def format_components(results, quick=False):
    """A table: a row a shape, ms a side, and each Keras side's torch/keras."""
    convs, norms = (CONVS[:1], NORMS[:1]) if quick else (CONVS, NORMS)
    sides = list(results)
    head = "".join(f"{side:>13s}" for side in sides)
    if "torch" in results:
        head += "".join(f"{'torch/' + x[6:]:>13s}" for x in sides if x != "torch")
    lines = [
        "forward + backward, ms a call (best of 5 rounds); a ratio above 1 means "
        "Keras is faster",
        f"  {'block':34s}{head}",
    ]
    rows = [
        ("conv", i, f"conv 3x3 {b[1]}x{b[2]}, {b[3]}->{b[4]}")
        for i, b in enumerate(convs)
    ]
    rows += [
        ("norm", i, f"GroupNorm+SiLU {b[1]}x{b[2]}x{b[3]}") for i, b in enumerate(norms)
    ]
    for kind, i, label in rows:
        cells = "".join(f"{results[side][kind][i]:13.2f}" for side in sides)
        if "torch" in results:
            ref = results["torch"][kind][i]
            cells += "".join(
                f"{ref / results[x][kind][i]:13.2f}" for x in sides if x != "torch"
            )
        lines.append(f"  {label:34s}{cells}")
    return "\n".join(lines)


def main(argv=None):
    side, threads, repeats, *rest = argv or sys.argv[1:]
    times = side_times(side, int(threads), int(repeats), quick="quick" in rest)
    print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
