"""A run's process, resolved and checked: `--process`, `--beta-schedule`,
`--schedule` and the process's own settings.

`--process NAME` picks the process (`keras_diffusion.schedules.PROCESSES`:
"vp", "edm", "flow", or one registered by the user) and `--beta-schedule` a
VP process's betas; `--schedule` takes either (a beta schedule, or a process
other than "vp") as before both existed. A process's settings are those
it declares (`Process.settings`: each a `TrainConfig` setting and a flag);
`None` takes its constructor's default, which `resolve` fills in so that
`config.json` records it. A setting of another process is refused, as is a
sampler that does not step on the process, before anything is written.
"""

from keras_diffusion.samplers import SAMPLERS
from keras_diffusion.samplers.base import applicable
from keras_diffusion.schedules.noise_schedule import BETA_SCHEDULES
from keras_diffusion.schedules.registry import PROCESSES, declared_settings
from keras_diffusion.utils.checks import check_choice, check_float


def flag(name):
    return "--" + name.replace("_", "-")


def received(config, names):
    """`name=value, ...` of `names` in `config`: the end of a refusal."""
    return ", ".join(f"{name}={getattr(config, name)!r}" for name in names)


def schedule_choices(processes=None):
    """The values of `--schedule`: the beta schedules and the processes
    (`processes`, by name; the registered ones by default) other than the
    VP one."""
    names = PROCESSES if processes is None else processes
    return (*BETA_SCHEDULES, *(name for name in names if name != "vp"))


def process_name(config):
    """The process `config` (a `TrainConfig`, as given) asks for, or `None`."""
    by_schedule = None
    if config.schedule is not None:
        check_choice("schedule", config.schedule, schedule_choices())
        by_schedule = config.schedule if config.schedule in PROCESSES else "vp"
    if config.beta_schedule is not None:
        check_choice("beta_schedule", config.beta_schedule, BETA_SCHEDULES)
        by_schedule = by_schedule or "vp"
    if config.process is not None:
        check_choice("process", config.process, tuple(PROCESSES))
    for name, value in (("schedule", by_schedule), ("beta_schedule", by_schedule)):
        given = getattr(config, name)
        if given is not None and config.process not in (None, value):
            raise ValueError(
                f"Arguments `process` and `{name}` disagree: {given!r} is a "
                f"setting of the {value!r} process. Received: "
                f"process={config.process!r}, {name}={given!r}"
            )
    if config.schedule in BETA_SCHEDULES and config.beta_schedule not in (
        None,
        config.schedule,
    ):
        raise ValueError(
            "Arguments `schedule` and `beta_schedule` name two beta schedules; "
            "give one. "
            f"Received: schedule={config.schedule!r}, "
            f"beta_schedule={config.beta_schedule!r}"
        )
    return config.process or by_schedule


def resolve(config, values):
    """Fills and checks the process settings of `values`, the dict that
    `config.resolve()` builds from `config` (the settings as given) and the
    defaults (where `values["schedule"]` is the preset's beta schedule)."""
    name = process_name(config) or "vp"
    process = PROCESSES[name]
    beta = config.beta_schedule or (
        config.schedule if config.schedule in BETA_SCHEDULES else None
    )
    if "beta_schedule" in _own(process):
        beta = beta or values["schedule"]
        if beta not in BETA_SCHEDULES:  # a preset of another process
            beta = "linear"
    values["process"], values["beta_schedule"] = name, beta
    values["schedule"] = beta or name
    _refuse_foreign_settings(config, values, process)
    values.update(process.run_choices(config.to_dict()))
    _measured_defaults(config, values, process)
    _check_objective(config, values, process)
    _default_sampler(config, values, process)
    _default_guidance(config, values, process)
    _scale_linear_betas(values)
    _fill_settings(values, process)


def _own(process):
    """The names of the settings `process` declares."""
    return {setting.name: setting for setting in process.settings}


def _measured_defaults(config, values, process):
    """The run settings the process measured best on this dataset
    (`Process.measured_defaults`), where none is given."""
    for name, value in process.measured_defaults.get(config.dataset, {}).items():
        if getattr(config, name) is None:
            values[name] = value


def _default_guidance(config, values, process):
    """The grid's guidance: the one given, else the process's where it has
    one and the preset guides, else the preset's."""
    preset = values["guidance_scale"]
    own = process.default_guidance_scale
    if config.guidance_scale is None and own is not None and (preset or 1.0) > 1.0:
        values["guidance_scale"] = own


def _scale_linear_betas(values):
    """Linear betas of a T other than 1000, when neither end is given."""
    timesteps = values["timesteps"]
    if (
        values["beta_schedule"] == "linear"
        and values["beta_start"] is None
        and values["beta_end"] is None
        and isinstance(timesteps, int)
        and timesteps > 20
    ):
        # DDPM's 1e-4..0.02 was chosen for T=1000; improved-diffusion
        # scales both ends by 1000/T, so that a shorter chain (the usual
        # T=300 of tutorials) still ends in noise.
        values["beta_start"] = 1e-4 * 1000 / timesteps
        values["beta_end"] = 0.02 * 1000 / timesteps


def _fill_settings(values, process):
    """Checks the process's settings in `values` (by building it) and fills
    the unset ones with its defaults, so that config.json records them."""
    own = _own(process)
    for field, value in process.from_run_settings(values).run_values().items():
        # `None` for a fact of the run stays: the run fills it in when built.
        if values.get(field) is None and own[field].filled_by is None:
            values[field] = value


def upgrade(saved):
    """A config.json of a release before `process` and `beta_schedule`, as
    this one records the same run (so that its interrupted run resumes)."""
    if saved is None or "process" in saved or "schedule" not in saved:
        return saved
    saved = dict(saved)
    name = saved["schedule"] if saved["schedule"] in PROCESSES else "vp"
    process = PROCESSES[name]
    saved["process"] = name
    saved["beta_schedule"] = saved["schedule"] if name == "vp" else None
    if len(process.prediction_types) == 1:
        saved["prediction_type"] = None
    _fill_settings(saved, process)
    return saved


def _refuse_foreign_settings(config, values, process):
    """Settings of other processes: refused when given; recorded as `None`
    unless every run has a default for them (`timesteps`). The objective's
    (`Setting.objective`) are `_check_objective`'s."""
    own = _own(process)
    for field, (setting, owners) in declared_settings().items():
        if field in own or field == "timesteps" or setting.objective:
            continue
        if getattr(config, field, None) is not None:
            names = [repr(n) for n in owners]
            either = " or ".join(
                [", ".join(names[:-1]), names[-1]] if names[1:] else names
            )
            raise ValueError(
                f"Argument `{field}` ({flag(field)}) applies with process "
                f"{either}, not {process.name!r}. Received: "
                f"{field}={getattr(config, field)!r}, process={process.name!r}"
            )
        values[field] = None


def _check_objective(config, values, process):
    """The prediction type and loss weighting, as the process takes them; a
    process that fixes what its network predicts records `None`."""
    fixed = len(process.prediction_types) == 1
    prediction = config.prediction_type
    if prediction is None:
        preset = values["prediction_type"]
        fits = preset in process.prediction_types
        prediction = preset if fits else process.prediction_types[0]
    for name, args in (
        ("prediction_type", (prediction, process.loss_weightings[0])),
        ("loss_weighting", (prediction, config.loss_weighting or "none")),
    ):
        try:
            process.check_objective(*args)
        except ValueError as error:
            raise ValueError(f"{error} ({flag(name)})") from None
    values["prediction_type"] = None if fixed else prediction
    values["loss_weighting"] = config.loss_weighting or "none"
    values["min_snr_gamma"] = _min_snr_gamma(config, process)


def _min_snr_gamma(config, process):
    """The Min-SNR gamma a run records: the one given, which its process
    must declare (read under `--loss-weighting min_snr`), else its
    process's default (`None` for one without)."""
    gamma = config.min_snr_gamma
    if gamma is not None:
        try:
            gamma = check_float("min_snr_gamma", gamma, greater_than=0.0)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{error} ({flag('min_snr_gamma')})") from None
        if "min_snr_gamma" not in _own(process):
            owners = declared_settings()["min_snr_gamma"][1]
            raise ValueError(
                f"Argument `min_snr_gamma` ({flag('min_snr_gamma')}) applies "
                "with process " + " or ".join(repr(n) for n in owners) + ", "
                f"not {process.name!r}. Received: min_snr_gamma={gamma!r}, "
                f"process={process.name!r}"
            )
    return min_snr_gamma(process, gamma)


def min_snr_gamma(process, gamma=None):
    """`gamma`, else the default that `process` declares (what a run of a
    release before `--min-snr-gamma` trained with), else `None`."""
    declared = _own(process).get("min_snr_gamma")
    if gamma is None and declared is not None:
        gamma = declared.default
    return gamma


def _default_sampler(config, values, process):
    """The grid's sampler: the one given, else the preset's where it steps
    on the process, else the process's default for its prediction type."""
    sampler = config.sampler
    if sampler is None and values["sampler"] is not None:
        if process.sampler_family in SAMPLERS[values["sampler"]].families():
            sampler = values["sampler"]
    if sampler is None:
        prediction = values["prediction_type"] or process.prediction_types[0]
        sampler, steps = process.default_sampler(prediction)
        if config.sampling_steps is None:  # 0 is refused, not replaced
            values["sampling_steps"] = steps
    check_choice("sampler", sampler, tuple(SAMPLERS))
    if process.sampler_family not in SAMPLERS[sampler].families():
        raise ValueError(
            f"Argument `sampler` ({sampler!r}) does not step on the "
            f"{process.name!r} process: use {flag('sampler')} "
            + "|".join(applicable(process))
            + f". Received: sampler={sampler!r}, process={process.name!r}"
        )
    values["sampler"] = sampler
