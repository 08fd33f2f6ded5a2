"""What a run's option costs: step time and peak memory with and without it,
measured side by side on the run's own config.

    python benchmarks/overhead.py posthoc-ema                  # the digits run
    python benchmarks/overhead.py posthoc-ema --data-dir emoji/ --image-size 32
    python benchmarks/overhead.py remat --data-dir emoji/ --image-size 64 \\
        --model-size base --batch-size 32
    python benchmarks/overhead.py lora --lora-rank 4 --data-dir emoji/

Step time: both models built in one process, trained in rounds of `steps`
steps in rotated order after a warm-up round. `posthoc-ema`: a round is the
run's snapshot interval (its updates / 16) and the tracking model's rounds
include its snapshot callback writing one snapshot, so the figure is what a
run pays. Peak memory: the largest resident set (VmHWM) of a fresh process
that builds one model and trains 2 rounds, alternated with the other,
`--processes` each. Prints the medians and the ratios; time it alone on the
machine. On a GPU it also prints the peak GPU allocation of each.
"""

import argparse
import json
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # python benchmarks/overhead.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks.peer_jobs import peak_rss_mib  # noqa: E402
from benchmarks.train_benchmark import rotated  # noqa: E402
from benchmarks.workers import run_worker  # noqa: E402

VARIANTS = ("off", "on")
# The TrainConfig field each option sets, and its value when off ("on" is
# True, or `--lora-rank`).
FEATURES = {
    "posthoc-ema": ("posthoc_ema", False),
    "remat": ("remat", False),
    "lora": ("lora_rank", None),
}


def _build(args, variant):
    """`(model, batches, steps, callbacks)` of the run's config."""
    import keras

    from keras_diffusion import callbacks
    from keras_diffusion.run.build import build_data_and_model
    from keras_diffusion.run.config import TrainConfig

    keras.utils.set_random_seed(0)
    field, off = FEATURES[args.feature]
    on = args.lora_rank if args.feature == "lora" else True
    settings = {field: on if variant == "on" else off}
    for name in ("model_size", "batch_size"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.data_dir:
        settings.update(
            dataset="folder", data_dir=args.data_dir, image_size=args.image_size
        )
    config = TrainConfig(**settings).resolve()
    dataset, model, steps_per_epoch = build_data_and_model(config)
    steps, extra = args.steps, []
    if args.feature == "posthoc-ema":
        steps = -(-config.epochs * steps_per_epoch // config.posthoc_snapshots)
        if variant == "on":
            folder = tempfile.mkdtemp(prefix="overhead-")
            extra = [callbacks.PosthocSnapshots(folder, every=steps)]
    return model, dataset.repeat(), steps, extra


def step_times(args):
    fits = {}
    for variant in VARIANTS:
        model, batches, steps, extra = _build(args, variant)
        model.fit(batches, epochs=1, steps_per_epoch=steps, verbose=0)  # warm-up
        fits[variant] = (model, batches, steps, extra)
    times = {variant: [] for variant in fits}
    for trial in range(args.rounds):
        for variant in rotated(fits, trial):
            model, batches, steps, extra = fits[variant]
            started = time.perf_counter()
            model.fit(
                batches, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=extra
            )
            times[variant].append((time.perf_counter() - started) / steps)
    return times, steps


def worker(args):
    """One process: build a model, train 2 rounds, print the peak RSS."""
    model, batches, steps, extra = _build(args, args.worker)
    model.fit(batches, epochs=1, steps_per_epoch=2 * steps, verbose=0, callbacks=extra)
    print(json.dumps({"peak_mib": peak_rss_mib(), "gpu_peak_mib": _gpu_peak_mib()}))


def _gpu_peak_mib():
    """The first GPU's peak allocation in MiB, or `None` without a GPU (the
    activations live there, not in the resident set)."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None
    return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


def _flags(args):
    flags = ["--image-size", str(args.image_size), "--steps", str(args.steps)]
    flags += ["--lora-rank", str(args.lora_rank)]
    flags += ["--data-dir", args.data_dir] if args.data_dir else []
    for name in ("model_size", "batch_size"):
        if getattr(args, name) is not None:
            flags += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return flags


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("feature", choices=sorted(FEATURES))
    parser.add_argument("--data-dir", help="an image folder (default: the digits)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--model-size", help="default: the run's preset")
    parser.add_argument("--batch-size", type=int, help="default: the run's preset")
    parser.add_argument(
        "--steps", type=int, default=3, help="steps a round (remat, lora; posthoc-ema "
        "takes its snapshot interval)"
    )  # fmt: skip
    parser.add_argument("--lora-rank", type=int, default=4, help="lora: the rank")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return
    peaks = {variant: [] for variant in VARIANTS}
    gpu_peaks = {variant: [] for variant in VARIANTS}
    for trial in range(args.processes):
        for variant in rotated(VARIANTS, trial):
            result = run_worker(
                "benchmarks.overhead", args.feature, "--worker", variant, *_flags(args)
            )
            peaks[variant].append(result["peak_mib"])
            gpu_peaks[variant].append(result["gpu_peak_mib"])
    times, steps = step_times(args)
    ratios = np.array(times["on"]) / np.array(times["off"])
    print(f"{args.feature} on {args.data_dir or 'digits'}: rounds of {steps} steps")
    for variant in VARIANTS:
        ms = np.array(times[variant]) * 1000
        print(
            f"{args.feature} {variant:3}: {np.median(ms):.1f} ms a step (min-max "
            f"{ms.min():.1f}-{ms.max():.1f}), peak RSS "
            f"{np.median(peaks[variant]):.0f} MiB ({peaks[variant]})"
        )
    print(
        f"on / off: step {np.median(ratios):.3f}x (rounds' ratios "
        f"{ratios.min():.3f}-{ratios.max():.3f}), peak RSS "
        f"{np.median(peaks['on']) / np.median(peaks['off']):.3f}x"
    )
    if None not in gpu_peaks["on"] + gpu_peaks["off"]:
        on, off = (np.median(gpu_peaks[v]) for v in ("on", "off"))
        print(f"GPU peak: on {on:.0f} MiB, off {off:.0f} MiB: {on / off:.3f}x")


if __name__ == "__main__":
    main()
