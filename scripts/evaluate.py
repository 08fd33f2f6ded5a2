"""Evaluate a trained model: FID and KID of its samples against real data.

    python scripts/evaluate.py runs/digits/model.keras --dataset digits \\
        --feature-extractor pixels --num-samples 500
    python scripts/evaluate.py model.keras --dataset cifar10 \\
        --weights inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5 \\
        --num-samples 50000 --save-statistics cifar10_train.npz
    python scripts/evaluate.py model.keras --statistics cifar10_train.npz

Prints the scores and writes them with the settings to a JSON file
(`--output`, by default `evaluation.json` next to the model). Numbers are
comparable with published FIDs only with InceptionV3 ImageNet weights, 50k
samples and the full training set as reference.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

DEFAULTS = {
    "num_samples": 1000,
    "num_real": None,
    "sampler": "ddim",
    "steps": 50,
    "seed": 0,
    "batch_size": 64,
    "guidance_scale": 1.0,
    "feature_extractor": "inception_v3",
    "weights": None,
    "kid_subsets": 100,
    "kid_subset_size": 1000,
}


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.set_defaults(**DEFAULTS)
    parser.add_argument("model", help="path of a .keras model saved by train.py")
    real = parser.add_mutually_exclusive_group(required=True)
    real.add_argument(
        "--dataset",
        help="real images: a keras_diffusion.data preset name (digits, mnist, "
        "fashion_mnist, cifar10) or an image folder",
    )
    real.add_argument(
        "--statistics",
        help="real statistics .npz (mu, sigma for FID; features for KID) "
        "written by --save-statistics",
    )
    parser.add_argument("--data-dir", help="local .npz of a keras data set")
    parser.add_argument("--num-samples", type=int, help="images to generate")
    parser.add_argument(
        "--num-real", type=int, help="real images to use (default: --num-samples)"
    )
    parser.add_argument(
        "--sampler", choices=["ddim", "ddpm", "dpm", "euler"], help="sampler"
    )
    parser.add_argument("--steps", type=int, help="sampler steps")
    parser.add_argument("--seed", type=int, help="generation seed")
    parser.add_argument("--batch-size", type=int, help="images per call")
    parser.add_argument("--guidance-scale", type=float, help="classifier-free guidance")
    parser.add_argument(
        "--feature-extractor",
        help="'inception_v3', 'pixels' (flattened images; cheap, for smoke "
        "tests) or the path of a .keras feature model",
    )
    parser.add_argument(
        "--weights",
        help="local InceptionV3 include_top=False weights (.h5); default: "
        "download the ImageNet weights",
    )
    parser.add_argument("--kid-subsets", type=int, help="KID subsets")
    parser.add_argument("--kid-subset-size", type=int, help="KID subset size")
    parser.add_argument(
        "--save-statistics", help="write the real set's statistics to this .npz"
    )
    parser.add_argument(
        "--output", help="JSON file to write (default: evaluation.json by the model)"
    )
    return parser


def run(args):
    from keras_diffusion import evaluation, generation
    from keras_diffusion.training import build_sampler

    sampler = build_sampler(args.sampler, args.steps)
    model = generation.load_model(args.model)
    if args.statistics is not None:
        real = args.statistics
    else:
        real = evaluation.real_image_batches(
            args.dataset,
            model.image_shape,
            batch_size=args.batch_size,
            seed=args.seed,
            data_dir=args.data_dir,
        )
    scores = evaluation.evaluate_model(
        model,
        real,
        num_samples=args.num_samples,
        sampler=sampler,
        feature_extractor=args.feature_extractor,
        weights=args.weights,
        batch_size=args.batch_size,
        seed=args.seed,
        num_real=args.num_real,
        guidance_scale=args.guidance_scale,
        kid_subsets=args.kid_subsets,
        kid_subset_size=args.kid_subset_size,
        save_statistics=args.save_statistics,
    )
    report = {
        "model": os.path.abspath(args.model),
        "reference": args.statistics or args.dataset,
        **scores,
        "sampler": {"name": args.sampler, **sampler.get_config()},
        "seed": args.seed,
        "guidance_scale": args.guidance_scale,
    }
    output = args.output or os.path.join(
        os.path.dirname(os.path.abspath(args.model)), "evaluation.json"
    )
    temporary = f"{output}.tmp"
    with open(temporary, "w") as f:
        json.dump(report, f, indent=2)
    os.replace(temporary, output)
    return report, output


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        report, output = run(args)
    except (ValueError, TypeError, OSError, RuntimeError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    for key in ("fid", "kid", "kid_std"):
        value = report[key]
        print(f"{key}: {'n/a' if value is None else f'{value:.6g}'}")
    print(
        f"({report['num_samples']} samples vs {report['num_real']} real, "
        f"{report['features']} features, {report['seconds']:.1f} s) -> {output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
