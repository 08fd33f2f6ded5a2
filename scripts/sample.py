"""Generate images from a trained model (a `.keras` file written by train.py).

    python scripts/sample.py runs/digits/model.keras --num-images 64 --out samples/
    python scripts/sample.py runs/digits/model.keras --labels 3 --guidance-scale 3

Writes `<out>/grid.png`, and with `--individual` one PNG an image, and with
`--npz` `<out>/samples.npz` (`images` uint8 NHWC, `labels` when conditional).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _labels(text):
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an int or comma-separated ints, got {text!r}"
        ) from None


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", help="path of a .keras model saved by train.py")
    parser.add_argument("--num-images", type=int, default=64, help="images to draw")
    parser.add_argument(
        "--sampler",
        choices=["ddim", "ddpm", "dpm", "euler"],
        default="ddim",
        help="sampling algorithm",
    )
    parser.add_argument(
        "--steps", type=int, default=50, help="sampler steps (ddpm: up to T)"
    )
    parser.add_argument(
        "--guidance-scale",
        type=float,
        default=1.0,
        help="classifier-free guidance (class-conditional models)",
    )
    parser.add_argument(
        "--labels",
        type=_labels,
        default=None,
        help="class-conditional models: one label for all, or one per image "
        "(comma-separated); default: rows of classes 0, 1, ...",
    )
    parser.add_argument("--seed", type=int, default=0, help="same seed, same images")
    parser.add_argument(
        "--batch-size", type=int, default=None, help="images per compiled call"
    )
    parser.add_argument("--out", default="samples", help="output folder")
    parser.add_argument(
        "--no-grid", action="store_true", help="do not write <out>/grid.png"
    )
    parser.add_argument(
        "--individual", action="store_true", help="also write <out>/NNNNN.png"
    )
    parser.add_argument(
        "--npz", action="store_true", help="also write <out>/samples.npz"
    )
    parser.add_argument(
        "--no-ema", action="store_true", help="sample with the live, not EMA, weights"
    )
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from keras_diffusion import generation

    try:
        written = generation.sample_to_files(
            args.model,
            args.out,
            num_images=args.num_images,
            sampler=args.sampler,
            steps=args.steps,
            guidance_scale=args.guidance_scale,
            labels=args.labels,
            seed=args.seed,
            batch_size=args.batch_size,
            grid=not args.no_grid,
            individual=args.individual,
            npz=args.npz,
            use_ema=not args.no_ema,
        )
    except (ValueError, TypeError, OSError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    for kind, path in written.items():
        print(f"  {kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
