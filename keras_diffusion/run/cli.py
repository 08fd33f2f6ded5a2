"""What the scripts share: argparse types, common flags and one-line errors.

The scripts in `scripts/` are thin: each keeps its defaults in one dict (or
`TrainConfig`), turns them into flags with the helpers here, and calls one
library function. A bad input ends in one line on stderr, `error: ...`, and
exit status 2, without a traceback; an error of the library itself (a bug)
or of Keras or TensorFlow keeps its traceback (`is_user_error`).
"""

import argparse
import dis
import importlib
import os
import sys

from keras_diffusion.data import decode
from keras_diffusion.samplers import SAMPLERS

# The sampling flags of sample.py and evaluate.py, by setting name.
SAMPLING_FLAGS = {
    "sampler": {"choices": list(SAMPLERS), "help": "sampling algorithm"},
    "steps": {"type": int, "help": "sampler steps (ddpm: up to T)"},
    "guidance_scale": {
        "type": float,
        "help": "classifier-free guidance (class-conditional models)",
    },
    "seed": {"type": int, "help": "same seed, same images"},
    "batch_size": {"type": int, "help": "images per compiled call"},
}


def flag(name):
    """The command-line flag of a setting: `batch_size` -> `--batch-size`."""
    return "--" + name.replace("_", "-")


def new_parser(doc, **kwargs):
    """A parser described by the first paragraph of `doc`, showing defaults."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        **kwargs,
    )


def add_model_argument(parser):
    parser.add_argument(
        "model",
        help="a .keras model or a run folder of train.py (its model.keras), a "
        "diffusers folder or a Hub id",
    )
    add_import_flag(parser)


def add_import_flag(parser):
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable): the module that registers a "
        "custom denoiser class the model uses",
    )


def import_modules(names):
    """Imports each module `--import` names, from the current folder too.

    Raises:
        ValueError: naming the flag and the module that does not import.
    """
    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure: the user's module
            raise ValueError(
                f"--import {name}: {type(error).__name__}: {one_line(error)}"
            ) from error


def add_flags(parser, flags, defaults):
    """Adds `--name` for each `name: options` of `flags`, default from `defaults`."""
    for name, options in flags.items():
        parser.add_argument(flag(name), default=defaults[name], **options)


def settings(args, names):
    """`{name: args.name}` for each name: the keyword arguments of a call."""
    return {name: getattr(args, name) for name in names}


def one_line(error):
    return " ".join(str(error).split())


# keras_diffusion/, the folder above this run/: its messages come from every
# package of the library, not from run/ alone.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_user_error(error):
    """Whether `error` is one of the library's messages about bad input.

    Those are the `ValueError`s and `TypeError`s (and `OSError`s, such as a
    missing folder, and `RuntimeError`s, such as a failed download) that a
    `raise` statement of `keras_diffusion` raises on purpose: they name the
    argument and the value received, and a traceback would only hide that.
    Any other error keeps its traceback: one raised inside Keras, TensorFlow
    or NumPy, and one Python raises on an operation of the library's own
    code (`None + 1`), which is a bug.
    """
    kinds = (ValueError, TypeError, OSError, RuntimeError)
    if not isinstance(error, kinds) or isinstance(error, NotImplementedError):
        return False
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if not os.path.abspath(code.co_filename).startswith(_PACKAGE_DIR):
        return False
    # The instruction that raised: a `raise` statement, or an operation.
    opnames = {i.offset: i.opname for i in dis.get_instructions(code)}
    return opnames.get(tb.tb_lasti) == "RAISE_VARARGS"


def report_error(error, hint="", status=2):
    """Prints `error: <error on one line><hint>` to stderr; returns `status`."""
    print(f"error: {one_line(error)}{hint}", file=sys.stderr)
    return status


def bool_or_auto(text):
    """`true`/`false` (or 1/0, yes/no, on/off), or `auto`."""
    value = text.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value == "auto":
        return "auto"
    raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")


def int_or_auto(text):
    """An int, or `auto`."""
    if text.lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an int or auto, got {text!r}"
        ) from None


def background(text):
    """`white`, `black` or `R,G,B`, as `keras_diffusion.data.decode` reads it."""
    try:
        return decode.background_name(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected white, black or R,G,B with values in 0..255, got {text!r}"
        ) from None


def strict_bool(text):
    """`true` or `false` (or 1/0, yes/no, on/off)."""
    value = bool_or_auto(text)
    if value == "auto":
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def comma_list(convert, expected):
    """An argparse type for comma-separated items, each read by `convert`."""

    def parse(text):
        try:
            return [convert(v) for v in text.split(",") if v.strip()]
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(
                f"expected {expected}, got {text!r}"
            ) from None

    return parse


int_list = comma_list(int, "comma-separated ints")
bool_list = comma_list(strict_bool, "comma-separated true/false")
