"""Does a ControlNet's control show? The digits, or a folder, held out.

Trains a ControlNet (`kd.enable_controlnet`, its control made of each
training image by an extractor) on a trained digits run, on half A of the
digits (the judge's split), then draws half B's labels under half B's
controls at each `control_scale` and measures:

- **IoU**: the generated image's own silhouette (the same extractor on it)
  against the control it was drawn under, its mean over images; at scale 0
  (the base model, the control unused) the chance level; a real held-out
  digit against its own control scores 1;
- **FD/floor** and the confident share of `DigitsQuality` (real digits
  score about 1);
- the training's time, and one epoch's beside the base model's on the
  same data, alternated (`--rounds`), their ratio.

    python scripts/train.py --output-dir runs/digits
    python benchmarks/control_quality.py --base runs/digits --epochs 10 \\
        --grid docs/control-samples.png

A folder's ControlNet run, trained by the CLI, is judged with `--run`
against a held-out folder: half A's images (`FolderQuality`'s split) give
the controls (and a text run's prompts: their captions, at the run's
guidance), the samples drawn under them are scored against half B, as
the floor scores half A's real images; the same IoU, and for edges also
their F1 (Dice) against the control's:

    python scripts/train.py --data-dir EMOJI_TRAIN --image-size 32 \
        --caption-column none --output-dir runs/emoji
    python scripts/train.py --data-dir EMOJI_TRAIN --init-from runs/emoji \
        --control silhouette --epochs 10 --output-dir runs/emoji-control
    python benchmarks/control_quality.py --run runs/emoji-control \
        --held-out EMOJI_TEST --grid docs/control-emoji.png

Prints a Markdown table; `--json FILE` writes every figure.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_diffusion as kd  # noqa: E402
from keras_diffusion.data.digits import load_digits_arrays  # noqa: E402
from keras_diffusion.data.directory import load_directory_arrays  # noqa: E402
from keras_diffusion.evaluation.digits_quality import DigitsQuality  # noqa: E402
from keras_diffusion.evaluation.folder_judge import run_preprocessing  # noqa: E402
from keras_diffusion.evaluation.folder_quality import quality_for  # noqa: E402
from keras_diffusion.utils import images as images_lib  # noqa: E402

SCALES = (0.0, 0.5, 1.0, 1.5)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    given = parser.add_mutually_exclusive_group(required=True)
    given.add_argument("--base", help="a digits run folder or .keras to control")
    given.add_argument("--run", help="a folder's ControlNet run (scripts/train.py)")
    parser.add_argument("--held-out", help="with --run: the held-out image folder")
    parser.add_argument(
        "--extractor", default="silhouette", choices=("silhouette", "edges")
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument(
        "--num-samples", type=int, help="the digits: 500; a folder: half of it"
    )
    parser.add_argument("--rounds", type=int, default=3, help="epochs timed a model")
    parser.add_argument("--grid", help="write controls and samples, a row each")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    if args.run and not args.held_out:
        parser.error("--run needs --held-out")
    return args


def iou(masks, controls):
    """The mean over images of |mask & control| / |mask | control|."""
    masks, controls = masks > 0.5, controls > 0.5
    inter = (masks & controls).sum(axis=(1, 2, 3))
    union = (masks | controls).sum(axis=(1, 2, 3))
    return float(np.mean(inter / np.maximum(union, 1)))


def f1(masks, controls):
    """The mean over images of 2 |mask & control| / (|mask| + |control|)."""
    masks, controls = masks > 0.5, controls > 0.5
    inter = (masks & controls).sum(axis=(1, 2, 3))
    sizes = masks.sum(axis=(1, 2, 3)) + controls.sum(axis=(1, 2, 3))
    return float(np.mean(2 * inter / np.maximum(sizes, 1)))


def _epoch_seconds(model, images, labels, batch_size):
    start = time.perf_counter()
    model.fit(images, labels, epochs=1, batch_size=batch_size, verbose=0)
    return time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    if args.run:
        return judge_folder_run(args)
    path = args.base
    if os.path.isdir(path):
        path = os.path.join(path, "model.keras")
    base = keras.saving.load_model(path)
    judge = DigitsQuality(base.image_shape[0], num_samples=args.num_samples or 500)
    images, labels = load_digits_arrays(base.image_shape[0])
    order = np.random.default_rng(0).permutation(len(images))  # the judge's split
    train_images, train_labels = (
        images[order[: len(order) // 2]],
        labels[order[: len(order) // 2]],
    )
    held_images, held_labels = judge.held_out()
    held_images = held_images[: judge.num_samples]
    held_labels = held_labels[: judge.num_samples]

    controlled = kd.enable_controlnet(
        base, conditioning_channels=1, extractor=args.extractor
    )
    controlled.compile(optimizer=keras.optimizers.Adam(args.learning_rate))
    start = time.perf_counter()
    controlled.fit(
        train_images,
        train_labels,
        epochs=args.epochs,
        batch_size=args.batch_size,
        verbose=2,
    )
    train_seconds = time.perf_counter() - start
    controls = controlled.controlnet.extract(held_images)

    results = {"train_seconds": train_seconds, "epochs": args.epochs, "scales": {}}
    grid_rows = [controls[:10] * 2 - 1]
    for scale in SCALES:
        samples = controlled.generate(
            len(held_labels),
            labels=held_labels,
            control=controls,
            control_scale=scale,
            seed=0,
            verbose=0,
        )
        score = judge.score(samples, held_labels)
        overlap = iou(controlled.controlnet.extract(samples), controls)
        results["scales"][scale] = {"iou": overlap, **_plain(score)}
        grid_rows.append(samples[:10])
        print(f"scale {scale}: IoU {overlap:.3f}, {_plain(score)}", flush=True)
    results["real_iou"] = iou(controlled.controlnet.extract(held_images), controls)

    # One epoch of each model on the same data, alternated, after a warm-up.
    base.compile(optimizer=keras.optimizers.Adam(args.learning_rate))
    times = {"base": [], "controlnet": []}
    for model in (base, controlled):
        _epoch_seconds(model, train_images, train_labels, args.batch_size)
    for _ in range(args.rounds):
        for name, model in (("base", base), ("controlnet", controlled)):
            times[name].append(
                _epoch_seconds(model, train_images, train_labels, args.batch_size)
            )
    results["epoch_seconds"] = times
    ratio = np.median(times["controlnet"]) / np.median(times["base"])
    results["epoch_ratio"] = float(ratio)

    print("\n| control_scale | IoU | FD/floor | confident | label agreement |")
    print("|---|---|---|---|---|")
    for scale, row in results["scales"].items():
        print(
            f"| {scale} | {row['iou']:.3f} | {row['fd_ratio']:.2f} | "
            f"{row['confident']:.2f} | {row['agreement']:.2f} |"
        )
    print(
        "\nreal held-out digits against their own controls: IoU "
        f"{results['real_iou']:.3f}"
    )
    print(
        f"ControlNet training: {train_seconds:.1f} s for {args.epochs} epochs; "
        "an epoch "
        f"{np.median(times['controlnet']):.2f} s against the base's "
        f"{np.median(times['base']):.2f} s (median of {args.rounds}): {ratio:.2f}x"
    )
    _write(args, grid_rows, results)


def judge_folder_run(args):
    """`--run RUN --held-out DIR`: a folder's ControlNet run, judged."""
    path = args.run
    if os.path.isdir(path):
        path = os.path.join(path, "model.keras")
    model = keras.saving.load_model(path)
    if model.controlnet is None or model.controlnet.extractor is None:
        raise SystemExit(f"--run {args.run}: not a ControlNet run of an extractor")
    background, resize = run_preprocessing(path)
    options = {"background": background, "resize": resize}
    options = {k: v for k, v in options.items() if v is not None}
    quality = quality_for(model, args.held_out, num_samples=args.num_samples, **options)
    height, width, channels = quality.image_shape
    images, _, _, _ = load_directory_arrays(
        args.held_out, (height, width), channels=channels, **options
    )
    order = np.random.default_rng(quality.seed).permutation(len(images))
    half_a = images[order[: len(order) // 2]][: quality.num_samples]
    controls = model.controlnet.extract(half_a.astype(np.float32) / 127.5 - 1.0)
    results = {"run": args.run, "num_samples": len(controls), "scales": {}}
    # A text model's: each control under its image's caption (half A's).
    condition = {}
    if quality.prompts is not None:
        condition["prompts"] = quality.prompts[: len(controls)]
    grid_rows = [np.repeat(controls[:10], channels, -1) * 2 - 1]
    for scale in SCALES:
        samples = model.generate(
            len(controls),
            control=controls,
            control_scale=scale,
            seed=0,
            verbose=0,
            **condition,
        )
        drawn = model.controlnet.extract(samples)
        row = {"iou": iou(drawn, controls), "f1": f1(drawn, controls)}
        row.update(_plain(quality.score(samples)))
        results["scales"][scale] = row
        grid_rows.append(samples[:10])
        print(f"scale {scale}: {row}", flush=True)
    print(f"\n{len(controls)} held-out controls; real images score IoU and F1 1")
    print("| control_scale | IoU | F1 | FD/floor |")
    print("|---|---|---|---|")
    for scale, row in results["scales"].items():
        print(
            f"| {scale} | {row['iou']:.3f} | {row['f1']:.3f} | {row['fd_ratio']:.2f} |"
        )
    _write(args, grid_rows, results)
    return results


def _write(args, grid_rows, results):
    """`--grid`'s rows (controls, then each scale's samples), `--json`'s
    figures, where asked for."""
    if args.grid:
        images_lib.save_grid(np.concatenate(grid_rows), args.grid, rows=len(grid_rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=float)


def _plain(score):
    return {k: float(v) for k, v in score.items() if np.isscalar(v)}


if __name__ == "__main__":
    main()
