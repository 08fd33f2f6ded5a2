"""What post-hoc EMA costs a run: step time and peak memory, with and without
`--posthoc-ema`, measured side by side on the run's own config.

    python benchmarks/posthoc_overhead.py                      # the digits run
    python benchmarks/posthoc_overhead.py --data-dir emoji/ --image-size 32

Step time: both models built in one process, trained in rounds of `every`
steps in rotated order after a warm-up; the post-hoc model's rounds include
its snapshot callback writing one snapshot a round (the run's own interval,
`every` = its updates / 16), so the figure is what a run pays. Peak memory:
the largest resident set (VmHWM) of a fresh process that builds one model
and trains 2 rounds, alternated with the other, 3 processes each. Prints the
medians and the ratios; time it alone on the machine.
"""

import argparse
import json
import os
import sys
import tempfile
import time

if __package__ in (None, ""):  # python benchmarks/posthoc_overhead.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks.peer_jobs import peak_rss_mib  # noqa: E402
from benchmarks.train_benchmark import rotated  # noqa: E402
from benchmarks.workers import run_worker  # noqa: E402

VARIANTS = ("off", "on")


def _build(args, variant):
    """`(model, batches, every, callbacks)` of the run's config."""
    import keras

    from keras_diffusion import callbacks
    from keras_diffusion.run.build import build_data_and_model
    from keras_diffusion.run.config import TrainConfig

    keras.utils.set_random_seed(0)
    settings = {"posthoc_ema": variant == "on"}
    if args.data_dir:
        settings.update(
            dataset="folder", data_dir=args.data_dir, image_size=args.image_size
        )
    config = TrainConfig(**settings).resolve()
    dataset, model, steps_per_epoch = build_data_and_model(config)
    updates = config.epochs * steps_per_epoch
    every = -(-updates // config.posthoc_snapshots)
    extra = []
    if variant == "on":
        folder = tempfile.mkdtemp(prefix="posthoc-overhead-")
        extra = [callbacks.PosthocSnapshots(folder, every=every)]
    return model, dataset.repeat(), every, extra


def step_times(args):
    fits = {}
    for variant in VARIANTS:
        model, batches, every, extra = _build(args, variant)
        model.fit(batches, epochs=1, steps_per_epoch=every, verbose=0)  # warm-up
        fits[variant] = (model, batches, every, extra)
    times = {variant: [] for variant in fits}
    for trial in range(args.rounds):
        for variant in rotated(fits, trial):
            model, batches, every, extra = fits[variant]
            started = time.perf_counter()
            model.fit(
                batches, epochs=1, steps_per_epoch=every, verbose=0, callbacks=extra
            )
            times[variant].append((time.perf_counter() - started) / every)
    return times, every


def worker(args):
    """One process: build a model, train 2 rounds, print the peak RSS."""
    model, batches, every, extra = _build(args, args.worker)
    model.fit(batches, epochs=1, steps_per_epoch=2 * every, verbose=0, callbacks=extra)
    print(json.dumps({"peak_mib": peak_rss_mib()}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", help="an image folder (default: the digits)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return
    flags = ["--image-size", str(args.image_size)]
    flags += ["--data-dir", args.data_dir] if args.data_dir else []
    peaks = {variant: [] for variant in VARIANTS}
    for trial in range(args.processes):
        for variant in rotated(VARIANTS, trial):
            result = run_worker(
                "benchmarks.posthoc_overhead", "--worker", variant, *flags
            )
            peaks[variant].append(result["peak_mib"])
    times, every = step_times(args)
    ratios = np.array(times["on"]) / np.array(times["off"])
    print(f"{args.data_dir or 'digits'}: a snapshot every {every} steps")
    for variant in VARIANTS:
        ms = np.array(times[variant]) * 1000
        print(
            f"posthoc {variant:3}: {np.median(ms):.1f} ms a step (min-max "
            f"{ms.min():.1f}-{ms.max():.1f}), peak RSS "
            f"{np.median(peaks[variant]):.0f} MiB ({peaks[variant]})"
        )
    print(
        f"on / off: step {np.median(ratios):.3f}x (rounds' ratios "
        f"{ratios.min():.3f}-{ratios.max():.3f}), peak RSS "
        f"{np.median(peaks['on']) / np.median(peaks['off']):.3f}x"
    )


if __name__ == "__main__":
    main()
