"""`TrainConfig`: every setting of a training run, resolved and checked.

`None` means "from the dataset preset": `TrainConfig.resolve()` fills each
`None` from the dataset's `keras_diffusion.data` preset (its schedule, model
and training settings), then from `FALLBACK`, and checks every value. The
resolved config is what a run folder's `config.json` records.
"""

import copy
import dataclasses

from keras_diffusion import data as data_lib
from keras_diffusion.data import decode
from keras_diffusion.models.unet_sizes import (
    MODEL_SIZES,
    default_model_size,
    gpu_present,
    unet_settings,
)
from keras_diffusion.run import (
    config_checks,
    init_from,
    keras_hub_run,
    process_config,
    text,
)

# The choices of each setting, re-exported for the command line and tests:
# those of the classes that use them (SAMPLERS, PREDICTION_TYPES,
# LOSS_WEIGHTINGS, STRATEGIES, BETA_SCHEDULES) and a run's own (LR_SCHEDULES,
# MIXED_PRECISION, LATENTS), all checked in `config_checks`.
from keras_diffusion.run.config_checks import (  # noqa: F401
    LOSS_WEIGHTINGS,
    PREDICTION_TYPES,
    SAMPLERS,
    STRATEGIES,
)
from keras_diffusion.run.run_settings import (  # noqa: F401
    LATENTS,
    LR_SCHEDULES,
    MIXED_PRECISION,
    RUN_SETTINGS,
)
from keras_diffusion.schedules.noise_schedule import BETA_SCHEDULES  # noqa: F401
from keras_diffusion.schedules.registry import PROCESSES, declared_settings
from keras_diffusion.utils import settings as settings_lib
from keras_diffusion.utils.checks import check_choice, check_int
from keras_diffusion.utils.settings import SECTIONS

# The names of `TrainConfig`'s own fields (the process's settings aside).
RUN_FIELDS = tuple(setting.name for setting in RUN_SETTINGS)

# The values of `schedule` (beta schedules, and processes other than "vp"),
# with the processes the library registers; those of `beta_schedule` are
# BETA_SCHEDULES (the processes and the values of `schedule` are
# `keras_diffusion.run.process_config`'s).
SCHEDULES = process_config.schedule_choices()

# The settings of a dataset without a preset (an image folder; a preset's
# recipe holds all of its own: `keras_diffusion.data.Recipe`); its U-Net is
# `default_model_size()` ("tiny" on a CPU, "base" on a GPU) for the image
# size; its training and sampling settings on a GPU are
# `data.IMAGE_GPU_TRAINING` (measured on 32x32 emoji).
FALLBACK = {
    "image_size": 64,
    "channels": 3,
    "background": decode.DEFAULT_BACKGROUND,
    "resize": decode.DEFAULT_RESIZE,
    "epochs": 50,
    "batch_size": 64,
    "learning_rate": 2e-4,
    "schedule": "cosine",
    "timesteps": 1000,
    **data_lib.IMAGE_GPU_TRAINING,
}
# On a CPU a folder run is short (its "tiny" U-Net trains a few thousand
# steps, not a GPU's 100k): a learning rate 10x higher, decayed to zero, and
# an EMA that forgets in ~200 steps. On 3,225 emoji at 32x32 this is 60
# epochs of 51 steps, about 20 minutes on 2 cores (docs/quality.md).
FALLBACK_CPU = {
    "epochs": 60,
    "learning_rate": 2e-3,
    "lr_schedule": "cosine",
    "ema_decay": 0.995,
}


def _run_fields():
    """`TrainConfig`'s fields: the run's own settings (`RUN_SETTINGS`), each
    with its declared default, and the process section."""
    fields = [
        (s.name, object, dataclasses.field(default=s.default)) for s in RUN_SETTINGS
    ]
    fields.append(("process_settings", dict, dataclasses.field(default_factory=dict)))
    return dataclasses.make_dataclass("_RunFields", fields, init=False)


# Settings tuned for a dataset, over its `keras_diffusion.data` preset: the
# digits ones make the default run finish in a few minutes on two CPU cores
# with recognisable digits of every class.
@dataclasses.dataclass(init=False)
class TrainConfig(_run_fields()):
    """Every setting of a training run; `None` means "from the dataset preset".

    `resolve()` fills each `None` from the dataset's `keras_diffusion.data`
    preset (its schedule, model and training settings), then from the generic
    fallback, and checks every value. The resolved config is what
    `config.json` records, by section (`sections()`).

    The settings are declared once: the run's own in
    `keras_diffusion.run.run_settings.RUN_SETTINGS` (data, network, the
    process's choice, training, the run's outputs), a process's in its class
    (`Process.settings`); docs/flags.md lists them all with their help. A
    config takes them flat, `TrainConfig(dataset="digits", epochs=1,
    sigma_min=0.01)`, and reads them so (`config.sigma_min`); a process's
    settings are kept in `process_settings` (config.json's "process"
    section), those of every registered process, `None` where not given.

    Raises:
        TypeError: an argument that is neither a run's setting nor one of a
            registered process's.
    """

    def __init__(self, process_settings=None, **settings):
        declared = declared_settings()
        unknown = sorted(set(settings) - set(RUN_FIELDS) - set(declared))
        if unknown:
            raise TypeError(
                "TrainConfig got settings that are neither a run's nor a "
                "registered process's (import the module of a process of "
                f"your own first): {', '.join(unknown)}. Received: "
                + ", ".join(f"{name}={settings[name]!r}" for name in unknown)
            )
        for setting in RUN_SETTINGS:
            value = settings.get(setting.name, copy.deepcopy(setting.default))
            object.__setattr__(self, setting.name, value)
        own = {name: None for name in declared}
        own.update(process_settings or {})
        own.update({k: v for k, v in settings.items() if k not in RUN_FIELDS})
        object.__setattr__(self, "process_settings", own)

    def __getattr__(self, name):
        # A process's setting, read flat: `config.sigma_min`.
        own = self.__dict__.get("process_settings")
        if own is not None and name in own:
            return own[name]
        if own is not None and name in declared_settings():
            return None  # of a process registered since
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r}"
        )

    def __setattr__(self, name, value):
        if name not in RUN_FIELDS and (
            name in self.process_settings or name in declared_settings()
        ):
            self.process_settings[name] = value
        else:
            object.__setattr__(self, name, value)

    def resolve(self):
        """Returns a new config with every `None` filled in and all values checked."""
        check_choice("dataset", self.dataset, data_lib.DATASET_NAMES)
        if keras_hub_run.is_source(self.init_from):
            # keras-hub's SD3 (`--init-from keras-hub:PRESET`): the preset
            # is loaded once every setting that needs none is checked.
            preset = keras_hub_run.load(self)
            config = keras_hub_run.apply(self, preset)._resolve()
            config.checkpoint = preset
            return config
        if self.init_from is None:
            return self._resolve()
        if not isinstance(self.init_from, str):
            raise TypeError(
                "Argument `init_from` must be a path or a Hub id. "
                f"Received: init_from={self.init_from!r}"
            )
        checkpoint = init_from.load(self.init_from)
        config = init_from.apply(self, checkpoint)
        text_settings = text.from_checkpoint(config, checkpoint.model)
        config = dataclasses.replace(config, **text_settings)._resolve()
        # The model is built from the checkpoint loaded here (not a field:
        # config.json records its source).
        config.checkpoint = checkpoint
        return config

    def _resolve(self):
        check_choice("dataset", self.dataset, data_lib.DATASET_NAMES)
        config_checks.check_recipe(self.dataset, self.recipe)
        values = self.to_dict()
        defaults = self._defaults()
        for key, value in values.items():
            if value is None and key in defaults:
                values[key] = defaults[key]
        if self.init_from is None and (
            self.model_size is not None or self.dataset not in data_lib.PRESETS
        ):
            size = values["model_size"] = self.model_size or default_model_size()
            check_choice("model_size", size, MODEL_SIZES)
            image_size = check_int("image_size", values["image_size"], 1)
            if values["latent"] == "sd-vae":  # the U-Net runs on the latent grid
                image_size = max(1, image_size // 8)
            for key, value in unet_settings(size, image_size).items():
                if getattr(self, key) is None:
                    values[key] = value
        process_config.resolve(self, values)
        # A keras-hub preset's model has no U-Net: no widths.
        if values["widths"] is not None and (
            values["attention_levels"] is None
            or len(values["attention_levels"]) != len(values["widths"])
        ):
            if self.attention_levels is not None:
                raise ValueError(
                    "Argument `attention_levels` must have one entry per level of "
                    f"widths={values['widths']}. Received: "
                    f"attention_levels={self.attention_levels!r}"
                )
            values["attention_levels"] = [False] * len(values["widths"])
        config = TrainConfig(**values)
        text.resolve(config, given=self)
        config_checks.check_values(config)
        config_checks.check_latent(config)
        return config

    def _defaults(self):
        """A folder's `FALLBACK` (with `FALLBACK_CPU` on a machine without a
        GPU), or every setting of the dataset preset's recipe: `recipe`, or
        the one it takes on this machine (`Preset.recipe_name`)."""
        if self.dataset not in data_lib.PRESETS:
            defaults = copy.deepcopy(FALLBACK)
            if not gpu_present():
                defaults.update(FALLBACK_CPU)
            if text.captioned(self):
                defaults.update(text.defaults(gpu_present()))
            return defaults
        preset = data_lib.get_preset(self.dataset)
        name = self.recipe or preset.recipe_name(gpu=gpu_present())
        recipe = preset.recipes[name]
        defaults = dict(
            recipe=name,
            image_size=recipe.image_size,
            channels=preset.channels,
            schedule=recipe.beta_schedule,
            timesteps=recipe.timesteps,
            widths=list(recipe.model["widths"]),
            num_res_blocks=recipe.model["num_res_blocks"],
            attention_levels=list(recipe.model["attention_levels"]),
            **recipe.training,
        )
        # The recipe's betas belong to its own schedule and T only.
        requested = self.beta_schedule or self.schedule
        if requested in (None, defaults["schedule"]) and self.timesteps in (
            None,
            defaults["timesteps"],
        ):
            defaults["beta_start"] = recipe.schedule.get("beta_start")
            defaults["beta_end"] = recipe.schedule.get("beta_end")
        return defaults

    def to_dict(self):
        """Every setting by name, flat: the run's and the process's."""
        values = {name: copy.deepcopy(getattr(self, name)) for name in RUN_FIELDS}
        values.update(copy.deepcopy(self.process_settings))
        return values

    def sections(self):
        """The settings by section, as config.json records them: `{"data":
        {...}, "network": {...}, "process": {"name": ..., its settings},
        "training": {...}, "run": {...}}` (`sections_of`)."""
        return sections_of(self.to_dict())


def sections_of(values):
    """Flat settings (`TrainConfig.to_dict()`, or an earlier release's
    config.json upgraded) by section. The process's section holds its name
    and its own settings (all but the run's where the process is not
    registered); `schedule`, which `process` and `beta_schedule` say, is
    left out."""
    sections = {name: {} for name in SECTIONS}
    for setting in RUN_SETTINGS:
        if setting.name not in ("process", "schedule"):
            sections[setting.section][setting.name] = values.get(setting.name)
    name = values.get("process")
    process = PROCESSES.get(name)
    own = (
        [s.name for s in process.settings]
        if process is not None
        else [k for k in values if k not in RUN_FIELDS]
    )
    sections["process"] = {"name": name, **{k: values.get(k) for k in own}}
    return sections


def upgrade(saved):
    """A config.json as this release records the same run (by section), so
    that its interrupted run resumes: one by sections is read flat; a
    release before `process` has its process settings upgraded
    (`process_config.upgrade`), and a setting added since takes its
    default, as the runs of then had none (`grad_accum` 1, no few-step
    settings; a VP process's Min-SNR gamma of 5.0; a process setting's
    `Setting.earlier`)."""
    saved = settings_lib.flat(saved)
    if saved is None:
        return None
    if "schedule" not in saved and "process" in saved:
        saved["schedule"] = saved.get("beta_schedule") or saved["process"]
    saved = process_config.upgrade(saved)
    saved = text.upgrade(saved)
    process = PROCESSES.get(saved.get("process"))
    if "min_snr_gamma" not in saved and process is not None:
        # A release before --min-snr-gamma: its process's default.
        saved["min_snr_gamma"] = process_config.min_snr_gamma(process)
    added = {
        setting.name: setting.default
        for setting in RUN_SETTINGS
        if setting.name not in saved
    }
    if "recipe" not in saved and saved.get("dataset") in data_lib.PRESETS:
        # A release before recipes trained a preset's first, on any machine.
        added["recipe"] = next(iter(data_lib.PRESETS[saved["dataset"]].recipes))
    added.update({name: None for name in declared_settings() if name not in saved})
    if process is not None:
        # A process setting added since: the value the run trained with.
        added.update(process.earlier_settings())
    return sections_of({**added, **saved})
