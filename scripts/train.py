"""Train a diffusion model; with no arguments, on the embedded digits.

    python scripts/train.py                       # digits, 16x16, a few minutes
    python scripts/train.py --dataset folder --data-dir my_images/ --image-size 64

Writes a run folder (default `runs/<dataset>`): `model.keras`, `samples.png`,
`config.json`, `log.csv`. Running the same command again after a crash
resumes the run; a finished run is replaced only with `--overwrite`.
Settings left unset come from the dataset's preset
(`keras_diffusion.data.PRESETS`).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


class _Shown(str):
    """A default shown in --help that stands for "not given"."""


class _FromPreset:
    """The default of a flag that the dataset's preset sets (argparse leaves
    non-string defaults unconverted); shows the digits value in --help."""

    def __init__(self, digits_value):
        self.digits_value = digits_value

    def __str__(self):
        value = self.digits_value
        if isinstance(value, list):
            value = ",".join(str(v).lower() for v in value)
        return f"the dataset's preset; digits: {value}"


def _bool(text):
    value = text.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value == "auto":
        return "auto"
    raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")


def _strict_bool(text):
    value = _bool(text)
    if value == "auto":
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def _one_line(error):
    return " ".join(str(error).split())


def _int_list(text):
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated ints, got {text!r}"
        ) from None


def _bool_list(text):
    try:
        return [_strict_bool(v) for v in text.split(",") if v.strip()]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated true/false, got {text!r}"
        ) from None


def build_parser():
    from keras_diffusion import training

    digits = training.TrainConfig().resolve()

    def preset(name):
        return _FromPreset(getattr(digits, name))

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Flags defaulting to the dataset's preset take the values of "
        "keras_diffusion.data.PRESETS.",
    )
    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset",
        default="digits",
        choices=["digits", "mnist", "fashion_mnist", "cifar10", "folder"],
        help="training data; digits ships with the package (no download)",
    )
    data.add_argument(
        "--data-dir",
        default=None,
        help="image folder for --dataset folder (class subfolders with "
        "--class-conditional); for mnist/fashion_mnist/cifar10 a local .npz "
        "used instead of downloading",
    )
    data.add_argument(
        "--image-size",
        type=int,
        default=preset("image_size"),
        help="images are resized to this",
    )
    data.add_argument(
        "--channels",
        type=int,
        default=preset("channels"),
        help="1 or 3 (--dataset folder)",
    )

    train = parser.add_argument_group("training")
    train.add_argument(
        "--epochs", type=int, default=preset("epochs"), help="passes over the data"
    )
    train.add_argument(
        "--batch-size",
        type=int,
        default=preset("batch_size"),
        help="global batch size (split over replicas)",
    )
    train.add_argument(
        "--learning-rate",
        type=float,
        default=preset("learning_rate"),
        help="Adam's (peak) learning rate",
    )
    train.add_argument(
        "--lr-schedule",
        choices=["constant", "cosine"],
        default=preset("lr_schedule"),
        help="cosine decays the learning rate to 0 over the run",
    )
    train.add_argument(
        "--ema-decay",
        type=float,
        default=preset("ema_decay"),
        help="EMA of the weights",
    )
    train.add_argument(
        "--mixed-precision",
        nargs="?",
        const="float16",
        default="none",
        choices=list(training.MIXED_PRECISION),
        help="compute dtype; float16 comes with loss scaling",
    )
    train.add_argument(
        "--jit-compile", type=_bool, default="auto", help="XLA: true, false or auto"
    )
    train.add_argument(
        "--steps-per-execution",
        type=int,
        default=1,
        help="training steps per compiled call",
    )
    train.add_argument("--seed", type=int, default=0, help="seeds everything")
    train.add_argument(
        "--strategy",
        default="none",
        choices=list(training.STRATEGIES),
        help="tf.distribute strategy",
    )

    diffusion = parser.add_argument_group("diffusion and model")
    diffusion.add_argument(
        "--schedule",
        choices=list(training.SCHEDULES),
        default=preset("schedule"),
        help="beta schedule",
    )
    diffusion.add_argument(
        "--timesteps", type=int, default=preset("timesteps"), help="T, diffusion steps"
    )
    diffusion.add_argument(
        "--prediction-type",
        choices=list(training.PREDICTION_TYPES),
        default=preset("prediction_type"),
        help="what the U-Net predicts",
    )
    diffusion.add_argument(
        "--loss-weighting",
        choices=list(training.LOSS_WEIGHTINGS),
        default="none",
        help="min_snr: Min-SNR-5 loss weights",
    )
    diffusion.add_argument(
        "--widths",
        type=_int_list,
        default=preset("widths"),
        help="U-Net channels per level, comma-separated",
    )
    diffusion.add_argument(
        "--num-res-blocks",
        type=int,
        default=preset("num_res_blocks"),
        help="residual blocks per level",
    )
    diffusion.add_argument(
        "--attention-levels",
        type=_bool_list,
        default=preset("attention_levels"),
        help="self-attention per level, comma-separated true/false",
    )
    diffusion.add_argument(
        "--class-conditional",
        type=_strict_bool,
        nargs="?",
        const=True,
        default=preset("class_conditional"),
        help="train on labels for classifier-free guidance (true/false)",
    )
    diffusion.add_argument(
        "--class-dropout",
        type=float,
        default=preset("class_dropout"),
        help="probability of dropping a label in training",
    )

    output = parser.add_argument_group("output")
    output.add_argument(
        "--output-dir", default=_Shown("runs/<dataset>"), help="the run folder"
    )
    output.add_argument(
        "--overwrite", action="store_true", help="replace a finished run there"
    )
    output.add_argument(
        "--sampler",
        choices=list(training.SAMPLERS),
        default=preset("sampler"),
        help="sampler of the grid",
    )
    output.add_argument(
        "--sampling-steps",
        type=int,
        default=preset("sampling_steps"),
        help="steps of the sampler",
    )
    output.add_argument(
        "--guidance-scale",
        type=float,
        default=preset("guidance_scale"),
        help="classifier-free guidance of the grid (class-conditional models)",
    )
    output.add_argument(
        "--num-samples",
        type=int,
        default=preset("num_samples"),
        help="images in samples.png",
    )
    output.add_argument(
        "--sample-every",
        type=int,
        default=0,
        help="also write samples/epoch_NNNN.png every N epochs (0: never)",
    )
    output.add_argument(
        "--checkpoint-every",
        type=int,
        default=5,
        help="save model.keras every N epochs (and at the end)",
    )
    output.add_argument(
        "--tensorboard", action="store_true", help="log to <output-dir>/tensorboard"
    )
    # A test hook: makes the loss of this optimizer step NaN.
    parser.add_argument("--debug-nan-at-step", type=int, help=argparse.SUPPRESS)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from keras_diffusion import training
    from keras_diffusion.callbacks import NonFiniteLossError
    from keras_diffusion.data import DatasetDownloadError

    settings = {
        name: (None if isinstance(value, _FromPreset) else value)
        for name, value in vars(args).items()
        if name not in ("output_dir", "overwrite", "debug_nan_at_step")
    }
    output_dir = args.output_dir
    if isinstance(output_dir, _Shown):
        output_dir = os.path.join("runs", args.dataset)
    try:
        result = training.train(
            training.TrainConfig(**settings),
            output_dir,
            overwrite=args.overwrite,
            nan_at_step=args.debug_nan_at_step,
        )
    except DatasetDownloadError as error:
        print(
            f"error: {_one_line(error)} (on the command line: --data-dir FILE.npz)",
            file=sys.stderr,
        )
        return 2
    except (ValueError, TypeError, NonFiniteLossError) as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return 2 if not isinstance(error, NonFiniteLossError) else 3
    print(f"Finished in {result.seconds:.0f}s. Outputs in {result.output_dir}:")
    print(f"  model:    {result.model_path}")
    print(f"  samples:  {result.samples_path}")
    print(f"  config:   {result.config_path}")
    print(f"  log:      {result.log_path}")
    if result.tensorboard_dir:
        print(f"  tensorboard: {result.tensorboard_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
