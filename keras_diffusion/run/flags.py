"""The flags of `scripts/train.py` and docs/flags.md, made from the settings'
declarations: the run's own (`run_settings.RUN_SETTINGS` and
`TRAIN_ARGUMENTS`) and each registered process's (`Process.settings`).

`--help` groups them by section: data, network, process, one group a
process ("process: edm": the settings it declares first), training, run.
A setting several processes declare (`timesteps`) is one flag, in the group
of the first, its help naming the others. A process registered outside the
library (`--import path/to/module.py`) gets its group the same way.
"""

import functools

from keras_diffusion import data as data_lib
from keras_diffusion.run import process_config
from keras_diffusion.run.config import TrainConfig
from keras_diffusion.run.run_settings import RUN_SETTINGS, TRAIN_ARGUMENTS
from keras_diffusion.schedules.registry import PROCESSES, declared_settings
from keras_diffusion.utils.settings import SECTIONS

RUN_FIELDS = {s.name for s in RUN_SETTINGS + TRAIN_ARGUMENTS}

# The library's command that writes docs/flags.md.
WRITE_TABLE = "python scripts/train.py --write-flag-table docs/flags.md"


def _choices(processes):
    """The choices that grow with the processes."""
    return {
        "process": tuple(processes),
        "schedule": process_config.schedule_choices(processes),
    }


def groups(processes=None):
    """`[(title, [(setting, options)])]`: each flag's `Setting` and its
    `add_argument` options (the default aside), by group.

    Args:
        processes: the processes whose settings are flags, by name; `None`
            for every registered one.
    """
    processes = PROCESSES if processes is None else processes
    choices = _choices(processes)
    by_section = {section: [] for section in SECTIONS}
    for setting in RUN_SETTINGS + TRAIN_ARGUMENTS:
        options = setting.argparse_options()
        if setting.name in choices:
            options["choices"] = choices[setting.name]
        by_section[setting.section].append((setting, options))
    declared = {
        name: (setting, tuple(o for o in owners if o in processes))
        for name, (setting, owners) in declared_settings().items()
    }
    by_process = {name: [] for name in processes}
    for setting, owners in declared.values():
        if not owners:
            continue
        options = setting.argparse_options()
        if len(owners) > 1:
            options["help"] += f" (--process {'|'.join(owners)})"
        by_process[owners[0]].append((setting, options))
    titled = []
    for section in SECTIONS:
        titled.append((section, by_section[section]))
        if section == "process":
            titled += [(f"process: {n}", flags) for n, flags in by_process.items()]
    return [(title, flags) for title, flags in titled if flags]


def add_flags(parser, defaults):
    """Adds every flag of `groups()` to `parser`, in its group, each with
    the default `defaults(setting)`; returns the groups by title."""
    added = {}
    for title, flags in groups():
        group = added[title] = parser.add_argument_group(title)
        for setting, options in flags:
            group.add_argument(setting.flag, default=defaults(setting), **options)
    return added


@functools.cache
def _digits():
    """The digits preset's run, resolved: what a flag not given stands for."""
    return TrainConfig().resolve()


# Defaults that say more in words.
_SHOWN = {
    "background": "white (a folder only)",
    "resize": "crop (a folder only)",
    "model_size": "the preset's model; a folder: tiny on a CPU, base on a GPU",
    "output_dir": "runs/<dataset>",
    "recipe": "the machine's: cpu where no GPU is found (mnist, fashion_mnist), "
    "else the preset's first",
}


def shown_default(setting):
    """A flag's default, in words: its declared one, or the digits preset's
    where it takes the preset's, or for a process's setting its process's
    (or the run's fact it is filled with)."""
    if setting.name in _SHOWN:
        return _SHOWN[setting.name]
    own = setting.name in RUN_FIELDS
    if own and setting.default is not None:
        return _text(setting.default)
    preset = getattr(_digits(), setting.name, None)
    if preset is not None and (own or setting.name in _digits_process()):
        return f"the dataset's preset; digits: {_text(preset)}"
    if setting.filled_by is not None:
        return f"the run's ({setting.filled_by})"
    if setting.run_default is not None:
        return f"{_text(setting.run_default)} (the class's: {setting.default})"
    return _text(setting.default) + _other_defaults(setting)


def _other_defaults(setting):
    """` (meanflow: -2.0)`: the processes whose own declaration of a shared
    setting has another default, or nothing."""
    _, owners = declared_settings().get(setting.name, (setting, ()))
    other = [
        f"{owner}: {_text(own.default)}"
        for owner in owners
        for own in PROCESSES[owner].settings
        if own.name == setting.name and own.default != setting.default
    ]
    return f" ({'; '.join(other)})" if other else ""


def _digits_process():
    """The names of the settings of the digits preset's process."""
    return {s.name for s in PROCESSES[_digits().process].settings}


def _text(value):
    if isinstance(value, (list, tuple)):
        return ",".join(str(v).lower() for v in value)
    return str(value)


def _where(preset, name):
    """Where a run takes the recipe `name` without `--recipe`."""
    if preset.cpu_recipe is None:
        return "any machine"
    return "no GPU found" if name == preset.cpu_recipe else "a GPU found"


def preset_table():
    """docs/flags.md's table of each preset's recipes, from `data.PRESETS`."""
    lines = [
        "## Presets",
        "",
        "Each dataset preset's recipes (`keras_diffusion.data.PRESETS`): every",
        "setting a flag above leaves to the preset. `--recipe NAME` picks one on",
        "any machine; without it a run takes the one for its machine.",
        "",
        "| dataset | recipe | without --recipe | image | U-Net widths (blocks) "
        "| schedule | epochs x batch | learning rate | prediction | EMA "
        "| labels (guidance) | sampler | XLA | measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, preset in data_lib.PRESETS.items():
        for name, recipe in preset.recipes.items():
            t = recipe.training
            labels = f"yes ({t['guidance_scale']})" if t["class_conditional"] else "no"
            sampler = (
                f"{t['sampler']}-{t['sampling_steps']}"
                if t["sampler"]
                else f"the process's ({t['sampling_steps']} steps)"
            )
            cells = [
                dataset,
                name,
                _where(preset, name),
                f"{recipe.image_size}x{recipe.image_size}",
                f"{_text(recipe.model['widths'])} ({recipe.model['num_res_blocks']})",
                f"{recipe.beta_schedule}, T={recipe.timesteps}",
                f"{t['epochs']} x {t['batch_size']}",
                f"{t['learning_rate']:g} {t['lr_schedule']}",
                t["prediction_type"],
                str(t["ema_decay"]),
                labels,
                sampler,
                str(t["jit_compile"]),
                recipe.measured.replace("|", "\\|"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def flag_table():
    """docs/flags.md: every flag of the library's settings and processes,
    by group, with its default, choices and help (`WRITE_TABLE` writes it;
    `tests/run/flags_test.py` checks it is current)."""
    library = {
        name: process
        for name, process in PROCESSES.items()
        if process.__module__.startswith("keras_diffusion.")
    }
    lines = [
        "# The flags of scripts/train.py",
        "",
        "Made from the settings' declarations (the run's own in",
        "`keras_diffusion/run/run_settings.py`, each process's in its class's",
        "`settings`); do not edit by hand: `" + WRITE_TABLE + "` writes it.",
        "A flag not given takes the dataset preset's value where the default",
        "says so; a process's setting, its process's default.",
    ]
    for title, flags in groups(library):
        lines += ["", f"## {title}", "", "| flag | default | choices | help |"]
        lines.append("|---|---|---|---|")
        for setting, options in flags:
            choices = options.get("choices")
            shown = "" if choices is None else ", ".join(str(c) for c in choices)
            help_text = options["help"].replace("|", "\\|")
            lines.append(
                f"| `{setting.flag}` | {shown_default(setting)} | {shown} | "
                f"{help_text} |"
            )
    lines += ["", *preset_table()]
    return "\n".join(lines) + "\n"
