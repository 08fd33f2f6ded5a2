"""Generate images from a trained model: a `.keras` file or run folder of train.py,
a diffusers folder or a Hub id.

    python scripts/sample.py runs/digits/model.keras --num-images 64 --out samples/
    python scripts/sample.py runs/digits/model.keras --labels 3 --guidance-scale 3
    python scripts/sample.py runs/digits/model.keras --sampler heun --steps 18
    python scripts/sample.py runs/emoji --prompt "red heart" --prompt "cat face"
    python scripts/sample.py runs/digits --init-images photos/ --strength 0.6
    python scripts/sample.py runs/digits --init-images photos/ --mask holes.png

Writes `<out>/grid.png`, and with `--individual` one PNG an image, and with
`--npz` `<out>/samples.npz` (`images` uint8 NHWC, `labels` when conditional,
`prompts` of a text model). A text model (trained on a captioned folder)
needs `--prompt` (and takes no `--labels`): it samples the prompts a row each
over `--num-images` (no more prompts than images), each shown under its image.
A latent model (`train.py --latent sd-vae`) decodes its samples to images; it
needs the keras-cv extra (`pip install ".[keras-cv]"`) to load.

With `--init-images DIR` it edits the images of DIR instead (resized and
cropped to the model's size, in file-name order): `--strength S` redraws them
(img2img: 0 keeps them, 1 samples anew), `--mask PNG|DIR` fills the white
region of the mask (one for all, or one an image) and keeps the black. A text
model then takes one `--prompt` for every image or one an image. The grid
then shows each row of inputs (the filled region grey) over its results.
"""

import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

# Nothing here imports TensorFlow before the flags are parsed.
import _startup  # noqa: E402

_startup.quiet_environment()

# `num_images` and the settings of `generation.SamplingOptions`, each a flag
# (`use_ema` is --no-ema), with their defaults: a copy, since the flags are
# parsed before TensorFlow loads (tests/scripts/sample_script_test.py keeps
# it the library's).
DEFAULTS = {
    "num_images": 64,
    "sampler": None,
    "steps": None,
    # The run's guidance (in the .keras file, else its run's config.json), 1.0.
    "guidance_scale": None,
    "labels": None,
    "seed": 0,
    "batch_size": None,
    "prompts": None,
    "negative_prompts": None,
    "control_images": None,
}
FLAGS = {
    "num_images": {"type": int, "help": "images to draw"},
    **_startup.SAMPLING_FLAGS,
    "labels": {
        "type": _startup.comma_list(int, "an int or comma-separated ints"),
        "help": "class-conditional models: one label for all, or one per image "
        "(comma-separated); default: rows of classes 0, 1, ...",
    },
    "control_images": {
        "metavar": "DIR",
        "help": "a ControlNet model (train.py --control): a folder of control "
        "PNGs of its size (white is 1), in turn over the images",
    },
}


def build_parser():
    parser = _startup.new_parser(__doc__)
    _startup.add_model_argument(parser)
    _startup.add_flags(parser, FLAGS, DEFAULTS)
    text = parser.add_argument_group("text models (trained on captions)")
    text.add_argument(
        "--prompt",
        dest="prompts",
        action="append",
        metavar="TEXT",
        help="a prompt (repeatable; a text model needs one): a row of the grid "
        "each, over --num-images (at most that many prompts); with --init-images, "
        "one for every image or one an image",
    )
    text.add_argument(
        "--negative-prompt",
        dest="negative_prompts",
        action="append",
        metavar="TEXT",
        help="guidance away from TEXT rather than from the empty prompt: one "
        "for all prompts, or one for each --prompt (repeatable)",
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
    edits = parser.add_argument_group("editing images")
    edits.add_argument("--init-images", help="a folder of images to edit")
    edits.add_argument(
        "--strength", type=float, help="img2img: how much to redraw, in [0, 1]"
    )
    edits.add_argument(
        "--mask", help="inpainting: a mask PNG or a folder of them; white is filled"
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_edit_flags(parser, args)
    _startup.import_tensorflow()
    from keras_diffusion.run import cli, generation

    try:
        cli.import_modules(args.imports)
        if args.init_images:
            written = _edit(args)
        else:
            written = generation.sample_to_files(
                args.model,
                args.out,
                grid=not args.no_grid,
                individual=args.individual,
                npz=args.npz,
                use_ema=not args.no_ema,
                log=print,
                **cli.settings(args, DEFAULTS),
            )
    except (ValueError, TypeError, OSError) as error:
        if not cli.is_user_error(error):
            raise  # a library, Keras or TensorFlow error: its traceback matters
        flags = cli.flag_names(parser, num_steps="--steps", folder="--init-images")
        return cli.report_error(error, flags=flags)
    for kind, path in written.items():
        print(f"  {kind}: {path}")
    return 0


def _check_edit_flags(parser, args):
    if (args.strength is not None or args.mask) and not args.init_images:
        parser.error("--strength and --mask edit the images of --init-images DIR")
    if args.init_images:
        for flag, given in (
            ("--individual", args.individual),
            ("--no-grid", args.no_grid),
        ):
            if given:
                parser.error(f"{flag} does not apply with --init-images")


def _edit(args):
    from keras_diffusion.run import cli, editing

    settings = cli.settings(args, DEFAULTS)
    settings.pop("num_images")  # the folder's images
    return editing.edit_to_files(
        args.model,
        args.out,
        args.init_images,
        strength=args.strength,
        mask=args.mask,
        npz=args.npz,
        use_ema=not args.no_ema,
        **settings,
    )


if __name__ == "__main__":
    sys.exit(_startup.run(main))
