"""`Setting`: a setting declared once, with what a run, a flag and the docs
need of it.

A process declares its settings (`Process.settings`, schedules/) and a
training run its own (`keras_diffusion.run.run_settings`); from those
declarations come `TrainConfig`'s fields, the flags of `scripts/train.py`
and their help, the sections of a run folder's `config.json` and the flag
table of docs/flags.md (docs/architecture.md, "Adding a setting").
"""

import argparse
import dataclasses

# The sections of a run's settings, in the order `config.json`, `--help`
# and docs/flags.md show them.
SECTIONS = ("data", "network", "process", "training", "run")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its name, type, default, choices and help.

    Attributes:
        name: the setting's name: a `TrainConfig` field, its flag
            (`--name-with-dashes`) and its key in `config.json`.
        type: `int`, `float`, `str`, `bool`, or a function that reads the
            flag's text (raising `argparse.ArgumentTypeError`).
        default: the value where none is given: a process's constructor
            default, or a run's own (`None`: the dataset preset's).
        choices: the values it takes, or `None`.
        help: what it does, in a line (the flag's help, docs/flags.md).
        section: a run setting's section (`SECTIONS`); a process's
            settings are its section, "process".
        argument: the process's constructor argument it sets, where its
            name differs (`timesteps` sets `num_train_timesteps`).
        filled_by: the fact of its own a run fills it with where none is
            given: `"updates"` (the run's optimizer updates) or
            `"data_std"` (its data's standard deviation).
        run_default: the value a run takes where none is given, where it
            was measured to differ from the constructor's default.
        objective: a setting of the objective (prediction type, loss
            weighting, Min-SNR gamma), the settings that `DiffusionModel`'s
            arguments of the same names also set: checked for every process
            by its `check_objective` and set on the built process by
            `with_objective` (`keras_diffusion.run.build`), not passed to
            its constructor.
        flag_options: more of `argparse`'s `add_argument` options
            (`nargs`, `const`, `metavar`).
        earlier: for a setting added after its process was released, the
            value that a config.json or `.keras` file saved without it
            trained with, where it differs from `default` (`None`: the
            default), so that those runs resume and load as they were.
    """

    name: str
    type: object = str
    default: object = None
    choices: tuple = None
    help: str = ""
    section: str = "process"
    argument: str = None
    filled_by: str = None
    run_default: object = None
    objective: bool = False
    flag_options: dict = dataclasses.field(default_factory=dict)
    earlier: object = None

    @property
    def flag(self):
        """`--name-with-dashes`."""
        return flag(self.name)

    @property
    def constructor_argument(self):
        """The process's constructor argument it sets."""
        return self.argument or self.name

    def argparse_options(self):
        """The options of `add_argument` for its flag (default aside)."""
        options = {"help": self.help}
        if self.type is bool and self.default is False:
            options["action"] = "store_true"
        elif self.type is bool:
            options.update(type=parse_bool, nargs="?", const=True)
        elif self.type is not str:
            options["type"] = self.type
        if self.choices is not None:
            options["choices"] = tuple(self.choices)
        options.update(self.flag_options)
        return options


def flat(saved):
    """A run's settings by name, from its config.json: one written by
    section (`{"data": {...}, "process": {"name": ..., ...}, ...}`) merged,
    the process's name as `"process"`; one written flat (an earlier
    release's) as it is; `None` for what is not a dict."""
    if not isinstance(saved, dict):
        return None
    if not isinstance(saved.get("process"), dict):
        return dict(saved)
    values = {}
    for section in SECTIONS:
        values.update(saved.get(section) or {})
    values.pop("name", None)  # the process section's, not a setting
    values["process"] = saved["process"].get("name")
    return values


def flag(name):
    """The command-line flag of a setting: `batch_size` -> `--batch-size`."""
    return "--" + name.replace("_", "-")


def parse_bool_or_auto(text):
    """`true`/`false` (or 1/0, yes/no, on/off), or `auto`."""
    value = str(text).lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    if value == "auto":
        return "auto"
    raise argparse.ArgumentTypeError(f"expected true, false or auto, got {text!r}")


def parse_bool(text):
    """`true` or `false` (or 1/0, yes/no, on/off)."""
    value = parse_bool_or_auto(text)
    if value == "auto":
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def parse_int_or_auto(text):
    """An int, or `auto`."""
    if str(text).lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an int or auto, got {text!r}"
        ) from None


def comma_list(convert, expected):
    """A reader of comma-separated items, each read by `convert`."""

    def parse(text):
        try:
            return [convert(v) for v in text.split(",") if v.strip()]
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(
                f"expected {expected}, got {text!r}"
            ) from None

    return parse


parse_int_list = comma_list(int, "comma-separated ints")
parse_bool_list = comma_list(parse_bool, "comma-separated true/false")
