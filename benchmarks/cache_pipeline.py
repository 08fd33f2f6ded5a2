"""Does the decode cache keep up? The cached pipeline against the step.

    python -m benchmarks.cache_pipeline --folder IMAGES --work-dir DIR
    python -m benchmarks.cache_pipeline --folder IMAGES --work-dir DIR \\
        --sizes 64 256 --batch-sizes 64 8 --model-size small

For each image size, in a fresh process: `from_directory(IMAGES, cache=...)`
(the cache built first, untimed, if it is not there) with the settings
`scripts/train.py` uses for a folder (shuffle, flips, the run's seed), its
epoch-ordered batches (what `train` fits), and a `--model-size` U-Net at
that size compiled as `train` compiles it (Adam; graph mode, which
`jit_compile="auto"` keeps for the `small` U-Net on a CPU). Then
`keras_diffusion.diagnostics.diagnose` times the pipeline alone, the step
alone and `fit`, and gives its verdict. The ratio printed is the pipeline's
images/s over the step's: above 1 the input keeps up (the diagnosis asks
for 1.5x headroom before it calls a run compute-bound).

`benchmarks.cache_memory` makes a suitable folder (`--work-dir DIR`, then
`IMAGES` = `DIR/x1`). The cache's pages are in the page cache after the
first epoch when the data fits in memory; larger data is read from disk.
"""

import argparse
import json
import os
import sys

from benchmarks.workers import run_worker


def measure(folder, cache, size, batch_size, model_size, steps, denoiser=None):
    """One size: a dict of the diagnosis' rates and verdict (of `denoiser`,
    when given, instead of a `model_size` U-Net)."""
    import keras

    from keras_diffusion import DiffusionModel, NoiseSchedule, UNet
    from keras_diffusion.data import from_directory
    from keras_diffusion.data.ordered import EpochOrder
    from keras_diffusion.diagnostics import diagnose
    from keras_diffusion.models.unet_sizes import unet_settings

    dataset = from_directory(
        folder, batch_size, size, cache=cache, seed=0, flip=True, verbose=False
    )
    batches = dataset.epoch_batches(EpochOrder(0))
    if denoiser is None:
        denoiser = UNet((size, size, 3), **unet_settings(model_size, size))
    model = DiffusionModel(denoiser, NoiseSchedule(1000, "cosine"), seed=0)
    model.compile(optimizer=keras.optimizers.Adam(2e-4), jit_compile=False)
    report = diagnose(model, batches, steps=steps, warmup=2, verbose=False)
    return {
        "size": size,
        "batch_size": batch_size,
        "parameters": int(denoiser.count_params()),
        "input": report.input_images_per_sec,
        "step": report.step_images_per_sec,
        "fit": report.fit_images_per_sec,
        "verdict": report.verdict,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="the image folder")
    parser.add_argument("--work-dir", required=True, help="where the caches go")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 8])
    parser.add_argument("--model-size", default="small")
    parser.add_argument("--steps", type=int, default=10, help="batches a timing")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if len(args.batch_sizes) != len(args.sizes):
        parser.error(
            "--batch-sizes needs one value per --sizes. Received: "
            f"--sizes {args.sizes} --batch-sizes {args.batch_sizes}"
        )
    if args.worker is not None:
        i = args.sizes.index(args.worker)
        cache = os.path.join(args.work_dir, f"cache_{args.worker}")
        result = measure(
            args.folder, cache, args.worker, args.batch_sizes[i],
            args.model_size, args.steps,
        )  # fmt: skip
        print(json.dumps(result), flush=True)
        return 0
    print(
        f"| size | batch | {args.model_size} U-Net | pipeline img/s | step img/s "
        "| pipeline/step | fit img/s | verdict |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for size in args.sizes:
        passed = list(sys.argv[1:] if argv is None else argv)
        r = run_worker("benchmarks.cache_pipeline", *passed, "--worker", str(size))
        print(
            f"| {size}x{size} | {r['batch_size']} | {r['parameters'] / 1e6:.2f} M "
            f"| {r['input']:,.0f} | {r['step']:,.1f} | {r['input'] / r['step']:,.0f}x "
            f"| {r['fit']:,.1f} | {r['verdict']} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
