"""What the scripts run before TensorFlow: their flags, the parse, a quiet import.

Importing `keras_diffusion` imports TensorFlow (seconds, and its C++ start-up
lines), so what a script needs to answer `--help` or a mistyped flag cannot
live in the package: it lives here, and imports nothing of the project. The
flag values the library accepts are repeated in `CHOICES`;
`tests/scripts/startup_test.py` checks them against the library's own lists.

After the parse, `import_tensorflow()` imports TensorFlow with the lines its
C++ libraries print at load hidden (they go to the process's stderr before
TensorFlow reads `TF_CPP_MIN_LOG_LEVEL`), and `run(main)` turns a Ctrl-C
before training into one line and exit status 130.
"""

import argparse
import difflib
import os
import re
import signal
import sys
import tempfile
import warnings

# The values of the choice flags of sample.py and evaluate.py, which parse
# before TensorFlow loads, as the library names them (checked against it by
# tests/scripts/startup_test.py). train.py's flags are made from the
# settings' declarations, after TensorFlow.
CHOICES = {
    "resize": ("crop", "pad", "stretch"),
    "sampler": (
        "ddim",
        "ddpm",
        "dpm",
        "euler",
        "heun",
        "repaint",
        "consistency",
        "meanflow",
    ),
}
BACKGROUNDS = ("white", "black")
# keras_diffusion.data.decode's DEFAULT_BACKGROUND and DEFAULT_RESIZE.
DEFAULT_BACKGROUND, DEFAULT_RESIZE = "white", "crop"
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
INTERRUPTED = "Interrupted (Ctrl-C)."

# The sampling flags of sample.py and evaluate.py, by setting name.
SAMPLING_FLAGS = {
    "sampler": {
        "choices": CHOICES["sampler"],
        "help": "sampling algorithm; default: the model's own, the one its run "
        "drew samples.png with, else its process's default (a diffusers DDPM "
        "checkpoint: ddim)",
    },
    "steps": {
        "type": lambda text: at_least(text, 1),
        "help": "sampler steps (ddpm: up to T; heun: 2 * steps - 1 model calls); "
        "default: the model's own sampler's, or for a --sampler named the "
        "process's default steps where it is its default sampler (heun: 18 "
        "on an EDM model), else the sampler's own (ddim: 50)",
    },
    "guidance_scale": {
        "type": float,
        "help": "classifier-free guidance (class-conditional models); default: "
        "the run's, recorded in the .keras file (an earlier release's file: "
        "its run folder's config.json), else 1.0",
    },
    "seed": {"type": int, "help": "same seed, same images"},
    "batch_size": {
        "type": lambda text: at_least(text, 1),
        "help": "images per compiled call",
    },
}


def quiet_environment():
    """Sets the environment the scripts run TensorFlow in.

    `TF_CPP_MIN_LOG_LEVEL=3` also hides TensorFlow's C++ ERROR lines, such as
    the failed `cuInit` of a machine without a GPU or oneDNN's fallbacks:
    they are diagnostics, not failures (a failure raises in Python). Unset
    or 2 (the usual advice, which still shows them) becomes 3; 0 or 1 shows
    them all, the start-up lines included.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") == "2":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


# What TensorFlow's C++ libraries print while they load, before anything reads
# TF_CPP_MIN_LOG_LEVEL: absl's own notice, INFO and WARNING lines (glog
# format: I0000 00:00:... file.cc:12] ...), the CPU-instructions notice's
# second line, and the CUDA libraries registering twice (a known TensorFlow
# wart on GPU builds). Any other line is printed.
_START_UP_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IW]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] "
    r"|To enable the following instructions: .* rebuild TensorFlow"
    r"|E\d{4} .*Unable to register cu\w+ factory"
)


def import_tensorflow():
    """Imports TensorFlow and Keras, hiding the lines their C++ libraries print
    as they load.

    Those lines go to file descriptor 2 before TensorFlow reads
    `TF_CPP_MIN_LOG_LEVEL`, so only a redirect of the descriptor silences
    them. It lasts for the import alone; the lines written then that are not
    start-up notices are printed after it, and all of them when the import
    fails. Devices are not touched: CUDA starts later, as TensorFlow's own.
    `TF_CPP_MIN_LOG_LEVEL` 0 or 1 shows everything.

    A Ctrl-C during the import exits at once, in `run`'s one line and status
    130: TensorFlow's import swallows the `KeyboardInterrupt` Python raises
    there, and the script would go on to train.
    """
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    previous = signal.signal(signal.SIGINT, _exit_interrupted(saved))
    try:
        if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("0", "1"):
            import keras  # noqa: F401
            import tensorflow  # noqa: F401
        else:
            _import_quietly(saved)
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(saved)


def _exit_interrupted(stderr):
    """A SIGINT handler that writes `run`'s line to descriptor `stderr` and
    ends the process with status 130, raising nothing that could be caught."""

    def handler(signum, frame):
        sys.stdout.flush()
        os.write(stderr, f"{INTERRUPTED}\n".encode())
        os._exit(EXIT_INTERRUPTED)

    return handler


def _import_quietly(stderr):
    """Imports Keras and TensorFlow with descriptor 2 redirected; `stderr`
    is a copy of the real one."""
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            import keras  # noqa: F401
            import tensorflow  # noqa: F401

            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(stderr, 2)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines()
            for line in lines:
                if failed or not _START_UP_NOISE.match(line):
                    print(line, file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that answers a bad command line in two lines: the
    error (with the closest choice to a mistyped value), and where to look."""

    def error(self, message):
        match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if match:
            typed, shown = match.groups()
            choices = [c.strip().strip("'") for c in shown.split(",")]
            # Swapped letters first (ddmi: ddim), which difflib ranks below
            # a changed one (ddpm).
            close = [c for c in choices if sorted(c) == sorted(typed)]
            close = close or difflib.get_close_matches(typed, choices, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            message = (
                f"{message[: match.start()]}invalid choice: '{typed}' (choose "
                f"from {', '.join(choices)}){hint}"
            )
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        print(f"(python {self.prog} --help lists every flag)", file=sys.stderr)
        sys.exit(2)


def new_parser(doc, **kwargs):
    """A parser described by the first paragraph of `doc`, showing defaults."""
    return Parser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        **kwargs,
    )


def flag(name):
    """The command-line flag of a setting: `batch_size` -> `--batch-size`."""
    return "--" + name.replace("_", "-")


def add_flags(parser, flags, defaults):
    """Adds `--name` for each `name: options` of `flags`, default from `defaults`."""
    for name, options in flags.items():
        parser.add_argument(flag(name), default=defaults[name], **options)


def imports_of(argv):
    """The modules `--import` names in `argv`, read before the other flags
    (a module may register a process, whose settings are flags)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_import_flag(parser)
    return parser.parse_known_args(argv)[0].imports


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
        "custom denoiser class the model uses, or a process of your own (its "
        "settings become flags); a module name importable from the current "
        "folder or PYTHONPATH, or a path/to/file.py",
    )


def run(main):
    """Runs `main()` as a script: its exit status, or 130 on a Ctrl-C.

    A Ctrl-C during training is the run's own (it saves and exits 75); one
    before it, while TensorFlow loads or the data is read, ends here in one
    line. A `UserWarning` (the library's, Keras') prints as one line,
    `warning: ...`, without the source line Python adds (`report(`).
    """
    show = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return main()
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        warnings.showwarning = show


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if not issubclass(category, UserWarning):
        _default_show_warning(message, category, filename, lineno, file, line)
        return
    text = " ".join(str(message).split())
    print(f"warning: {text}", file=sys.stderr if file is None else file)


_default_show_warning = warnings.showwarning


def at_least(text, minimum):
    """An int of at least `minimum`, for a flag's `type`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(
            f"expected an int of at least {minimum}, got {text!r}"
        )
    return value


def background(text):
    """`white`, `black` or `R,G,B` (0..255 each), as the library reads it."""
    name = text.strip().lower()
    if name in BACKGROUNDS:
        return name
    parts = name.split(",")
    if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
        values = tuple(int(p) for p in parts)
        if all(0 <= v <= 255 for v in values):
            # One name a colour, as the library writes it in config.json.
            names = {(255, 255, 255): "white", (0, 0, 0): "black"}
            return names.get(values, ",".join(str(v) for v in values))
    raise argparse.ArgumentTypeError(
        f"expected white, black or R,G,B with values in 0..255, got {text!r}"
    )


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
