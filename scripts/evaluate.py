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

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_diffusion import cli  # noqa: E402

# The settings of `evaluation.evaluate_saved_model`, each a flag.
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
FLAGS = {
    "num_samples": {"type": int, "help": "images to generate"},
    "num_real": {"type": int, "help": "real images to use (default: --num-samples)"},
    **cli.SAMPLING_FLAGS,
    "feature_extractor": {
        "help": "'inception_v3', 'pixels' (flattened images; cheap, for smoke "
        "tests) or the path of a .keras feature model",
    },
    "weights": {
        "help": "local InceptionV3 include_top=False weights (.h5); default: "
        "download the ImageNet weights",
    },
    "kid_subsets": {"type": int, "help": "KID subsets"},
    "kid_subset_size": {"type": int, "help": "KID subset size"},
}


def build_parser():
    parser = cli.new_parser(__doc__)
    cli.add_model_argument(parser)
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
    parser.add_argument("--data-path", help="local .npz of a keras data set")
    cli.add_flags(parser, FLAGS, DEFAULTS)
    parser.add_argument(
        "--save-statistics", help="write the real set's statistics to this .npz"
    )
    parser.add_argument(
        "--output", help="JSON file to write (default: evaluation.json by the model)"
    )
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from keras_diffusion import evaluation

    try:
        report, output = evaluation.evaluate_saved_model(
            args.model,
            dataset=args.dataset,
            statistics=args.statistics,
            data_path=args.data_path,
            output=args.output,
            save_statistics=args.save_statistics,
            **cli.settings(args, DEFAULTS),
        )
    except (ValueError, TypeError, OSError, RuntimeError) as error:
        if not cli.is_user_error(error):
            raise  # a library, Keras or TensorFlow error: its traceback matters
        return cli.report_error(error)
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
