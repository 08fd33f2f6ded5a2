"""The registered processes: the choices of `--process`, and their settings.

`register_process` makes a `Process` subclass a choice of `--process` (and of
`TrainConfig(process=...)`); `declared_settings` gathers the settings every
registered process declares, from which the run's settings, flags and
config.json sections are made (docs/architecture.md, "Settings, declared
once").
"""

# The registered processes by name: the choices of `--process`, the
# library's in `_LISTED` order (whatever order their modules load in), then
# the others as they register.
PROCESSES = {}
_LISTED = ("vp", "edm", "flow", "consistency", "meanflow")


def register_process(cls):
    """Class decorator: makes `cls` a choice of `--process` under `cls.name`."""
    if not (isinstance(cls.name, str) and cls.name):
        raise ValueError(
            f"A process needs a `name` to be registered. Received: {cls!r}"
        )
    PROCESSES[cls.name] = cls
    ordered = sorted(
        PROCESSES.items(),
        key=lambda item: _LISTED.index(item[0]) if item[0] in _LISTED else len(_LISTED),
    )
    PROCESSES.clear()
    PROCESSES.update(ordered)
    return cls


def declared_settings():
    """Every registered process's settings, by name: `(setting, owners)`,
    the first declaration and the names of the processes that declare it."""
    declared = {}
    for name, process in PROCESSES.items():
        for setting in process.settings:
            first, owners = declared.get(setting.name, (setting, ()))
            declared[setting.name] = (first, (*owners, name))
    return declared
