"""Evaluate a trained model: FID and KID of its samples against real data, or
its Frechet distance over the real floor of a held-out image folder.

    python scripts/evaluate.py runs/digits/model.keras --dataset digits \\
        --feature-extractor pixels --num-samples 500
    python scripts/evaluate.py model.keras --dataset cifar10 \\
        --weights inception_v3_weights_tf_dim_ordering_tf_kernels_notop.h5 \\
        --num-samples 50000 --save-statistics cifar10_train.npz
    python scripts/evaluate.py model.keras --statistics cifar10_train.npz
    python scripts/evaluate.py runs/emoji/model.keras --judge-folder heldout/

Prints the scores and writes them with the settings to a JSON file
(`--output`, by default `evaluation.json` next to the model). Numbers are
comparable with published FIDs only with InceptionV3 ImageNet weights, 50k
samples and the full training set as reference.

`--judge-folder DIR` needs no network and no download: DIR holds images the
model did not train on, decoded as training decodes a folder (the run's
--background and --resize, read from its config.json). It prints `fd`, the
Frechet distance of the samples' 8x8 block means (PCA, 20 components) to half
the folder, `floor`, that of as many real images of the other half, and
`fd_ratio` = fd / floor: about 1 for real images, far above for noise or blur
(keras_diffusion.evaluation.folder_quality). It generates half the folder's images and
writes `quality.json` by the model.
"""

import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

# Nothing here imports TensorFlow before the flags are parsed.
import _startup  # noqa: E402

_startup.quiet_environment()

# The settings of `evaluation.evaluate_saved_model`, each a flag.
DEFAULTS = {
    "num_samples": None,
    "num_real": None,
    # The model's own sampler (its run's, else its process's default) and
    # its run's guidance.
    "sampler": None,
    "steps": None,
    "seed": 0,
    "batch_size": 64,
    "guidance_scale": None,
    "feature_extractor": "inception_v3",
    "weights": None,
    "kid_subsets": 100,
    "kid_subset_size": 1000,
}
FLAGS = {
    "num_samples": {
        "type": int,
        "help": "images to generate (default: 1000; with --judge-folder, half "
        "the folder, the most it allows)",
    },
    "num_real": {"type": int, "help": "real images to use (default: --num-samples)"},
    **_startup.SAMPLING_FLAGS,
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
FID_SAMPLES = 1000
# The settings of `folder_judge.judge_saved_model` beyond the sampling ones.
JUDGE_DEFAULTS = {
    "background": None,
    "resize": None,
    "native_size": 8,
    "num_components": 20,
    "caption_column": None,
}
JUDGE_FLAGS = {
    "background": {
        "type": _startup.background,
        "help": "--judge-folder: white, black or R,G,B under transparency "
        "(default: the run's, from config.json by the model, else white)",
    },
    "resize": {
        "choices": _startup.CHOICES["resize"],
        "help": "--judge-folder: how other aspect ratios are fitted (default: "
        "the run's, else crop)",
    },
    "native_size": {
        "type": int,
        "help": "--judge-folder: the side images are compared at (block means)",
    },
    "num_components": {"type": int, "help": "--judge-folder: PCA components"},
    "caption_column": {
        "help": "--judge-folder: a text model's captions' column in the "
        "folder's metadata (default: the run's, else text)",
    },
}
# Flags of FID/KID only, refused with --judge-folder (their defaults are None).
FID_ONLY = ("num_real", "data_path", "save_statistics", "weights")


def build_parser():
    parser = _startup.new_parser(__doc__)
    _startup.add_model_argument(parser)
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
    real.add_argument(
        "--judge-folder",
        metavar="DIR",
        help="held-out image folder: print fd, floor and fd_ratio (about 1 for "
        "real images) instead of FID/KID; see above",
    )
    parser.add_argument("--data-path", help="local .npz of a keras data set")
    _startup.add_flags(parser, FLAGS, DEFAULTS)
    _startup.add_flags(parser, JUDGE_FLAGS, JUDGE_DEFAULTS)
    parser.add_argument(
        "--save-statistics", help="write the real set's statistics to this .npz"
    )
    parser.add_argument(
        "--output",
        help="JSON file to write (default: evaluation.json by the model; "
        "quality.json with --judge-folder)",
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    refused = _check_flags(args)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    _startup.import_tensorflow()
    from keras_diffusion.run import cli

    try:
        cli.import_modules(args.imports)
        if args.judge_folder is not None:
            return judge(args)
        report, output = evaluate(args)
    except (ValueError, TypeError, OSError, RuntimeError) as error:
        if not cli.is_user_error(error):
            raise  # a library, Keras or TensorFlow error: its traceback matters
        flags = cli.flag_names(
            parser, num_steps="--steps", directory="--judge-folder", real="--statistics"
        )
        return cli.report_error(error, flags=flags)
    for key in ("fid", "kid", "kid_std"):
        value = report[key]
        print(f"{key}: {'n/a' if value is None else f'{value:.6g}'}")
    print(
        f"({report['num_samples']} samples vs {report['num_real']} real, "
        f"{report['features']} features, {report['seconds']:.1f} s) -> {output}"
    )
    return 0


def _check_flags(args):
    """The one-line refusal of the flags of the other kind of evaluation
    (FID/KID or the folder judge), or `None`; sets --num-samples's default
    for FID/KID."""
    if args.judge_folder is None:
        given = [n for n in JUDGE_DEFAULTS if getattr(args, n) != JUDGE_DEFAULTS[n]]
        if given:
            return (
                f"{', '.join(_startup.flag(n) for n in given)} "
                f"{'is' if len(given) == 1 else 'are'} for --judge-folder only"
            )
        if args.num_samples is None:
            args.num_samples = FID_SAMPLES
        return None
    given = [n for n in FID_ONLY if getattr(args, n) is not None]
    if given:
        return (
            f"{', '.join(_startup.flag(n) for n in given)} "
            f"{'is' if len(given) == 1 else 'are'} for FID/KID (--dataset, "
            "--statistics), not --judge-folder"
        )
    return None


def evaluate(args):
    from keras_diffusion.evaluation import evaluate as evaluation
    from keras_diffusion.run import cli

    return evaluation.evaluate_saved_model(
        args.model,
        dataset=args.dataset,
        statistics=args.statistics,
        data_path=args.data_path,
        output=args.output,
        save_statistics=args.save_statistics,
        verbose=1,
        **cli.settings(args, DEFAULTS),
    )


def judge(args):
    from keras_diffusion.evaluation import folder_judge, folder_quality
    from keras_diffusion.run import cli

    names = ("num_samples", *_startup.SAMPLING_FLAGS, *JUDGE_DEFAULTS)
    report, output = folder_judge.judge_saved_model(
        args.model,
        args.judge_folder,
        output=args.output,
        verbose=1,
        **cli.settings(args, names),
    )
    for key in folder_quality.REPORTED:
        print(f"{key}: {report[key]:.6g}")
    print(
        f"({folder_quality.summary(report)}; {report['num_samples']} samples, "
        f"{report['seconds']:.1f} s) -> {output}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(_startup.run(main))
