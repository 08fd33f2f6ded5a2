"""What the scripts share after TensorFlow is imported: one-line errors.

The scripts in `scripts/` are thin: each parses its flags before TensorFlow
loads (`scripts/_startup.py`, which cannot live in this package: importing it
loads TensorFlow) and calls one library function. A bad input ends in one
line on stderr, `error: ...`, naming the flag typed, and exit status 2,
without a traceback; an error of the library itself (a bug) or of Keras or
TensorFlow keeps its traceback (`is_user_error`).
"""

import dis
import importlib
import importlib.util
import os
import re
import sys

from keras_diffusion.samplers import SAMPLERS


def import_modules(names):
    """Imports each module `--import` names: a module name, found from the
    current folder too, or the path of a `.py` file.

    Raises:
        ValueError: naming the flag and the module that does not import, and
            for a module not found, where it was looked for.
    """
    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            if name.endswith(".py"):
                _import_file(name)
            else:
                importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name.split(".")[0]:
                raise ValueError(f"--import {name}: {one_line(error)}") from error
            raise ValueError(
                f"--import {name}: no module {name!r} in the current folder "
                f"({os.getcwd()}) or on PYTHONPATH; pass its file (--import "
                f"path/to/{name.replace('.', '/')}.py) or add its folder to "
                "PYTHONPATH"
            ) from error
        except Exception as error:  # any failure: the user's module
            raise ValueError(
                f"--import {name}: {type(error).__name__}: {one_line(error)}"
            ) from error


def _import_file(path):
    if not os.path.isfile(path):
        raise ValueError(f"--import {path}: no such file")
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Under its own name, so that the classes it registers load as from a
    # module of that name, and a second --import of it is the same module.
    sys.modules[name] = module
    spec.loader.exec_module(module)


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


def report_error(error, hint="", status=2, flags=None):
    """Prints `error: <error on one line><hint>` to stderr; returns `status`.

    `flags` maps the library's argument names to the flags typed
    (`{"num_steps": "--steps"}`, see `flag_names`): the message names those.
    """
    print(f"error: {as_flags(one_line(error), flags or {})}{hint}", file=sys.stderr)
    return status


def flag_names(parser, **aliases):
    """`{dest: "--flag"}` of a parser's options, and `aliases` (the names of
    library arguments a flag feeds under another name, `num_steps="--steps"`)."""
    names = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        names[action.dest] = action.option_strings[-1]
        if action.nargs == 0 and action.const is True:
            # A flag that takes no value (store_true): `remat=True` is
            # `--remat` itself, not `--remat True`.
            names[f"{action.dest}=True"] = action.option_strings[-1]
    return {**names, **aliases}


def as_flags(message, flags):
    """`message` with the library's argument names replaced by the flags typed.

    The library's checks say ``Argument `num_steps` must be at least 1.
    Received: num_steps=0``, right for a Python caller; the command line
    reads ``--steps must be at least 1. Received: --steps 0``. Sampler
    classes become the `--sampler` values that name them.
    """
    message = _sampler_names(message)
    for name, flag in sorted(flags.items(), key=lambda item: -len(item[0])):
        if name.endswith("=True"):
            message = re.sub(rf"\b(?<!-){re.escape(name)}\b", flag, message)
            continue
        message = re.sub(rf"Argument `{name}`( \({flag}\))?", flag, message)
        message = message.replace(f"`{name}`", flag)
        message = re.sub(rf"\b(?<!-){name}=", f"{flag} ", message)
    # A hint "(data_dir, --data-dir)" or "(--data-dir)" says what the
    # message now says itself.
    return re.sub(
        r" \((?:\w+, )?(--[\w-]+)\)",
        lambda m: "" if _count(message, m.group(1)) > 1 else f" ({m.group(1)})",
        message,
    )


def _count(message, flag):
    """The times `message` names `flag` (not a longer flag it begins)."""
    return len(re.findall(rf"{re.escape(flag)}(?![\w-])", message))


def _sampler_names(message):
    """Sampler classes named as `--sampler` values: `--sampler euler|heun`."""
    classes = {cls.__name__: name for name, cls in SAMPLERS.items()}
    pattern = "|".join(sorted(classes, key=len, reverse=True))
    message = re.sub(
        rf"Received: sampler=({pattern})\(.*\)",
        lambda m: f"Received: --sampler {classes[m.group(1)]}",
        message,
    )

    def choices(match):
        names = re.findall(pattern, match.group(0))
        return "Use --sampler " + "|".join(classes[n] for n in names)

    message = re.sub(rf"[Uu]se one of (?:(?:{pattern})(?:, | or )?)+", choices, message)
    return re.sub(
        rf"\b({pattern})\b", lambda m: f"--sampler {classes[m.group(1)]}", message
    )
