"""Data set presets: each data set's recipes, the settings measured to
train on it (`make_dataset`, in `datasets`, builds its data)."""

import copy
import dataclasses

from keras_diffusion.utils.checks import check_choice


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One way to train a preset's data set, with the measurement behind it.

    Args:
        image_size: int, images are `image_size x image_size`.
        schedule: dict of `keras_diffusion.NoiseSchedule` kwargs.
        model: dict of `keras_diffusion.UNet` kwargs.
        training: dict of every training and sampling setting a preset
            decides (`TRAINING_SETTINGS`), each a `keras_diffusion.TrainConfig`
            setting, and optionally any other. A `sampler` of `None` is the
            process's default for the prediction type
            (`keras_diffusion.schedules.DEFAULT_SAMPLERS`), so that another
            `--process` samples with its own.
        measured: str, what chose these settings (docs/flags.md's preset
            table shows it).
    """

    image_size: int
    schedule: dict
    model: dict
    training: dict
    measured: str

    @property
    def beta_schedule(self):
        """The schedule's name, as `--schedule` takes it."""
        return self.schedule.get("beta_schedule", "linear")

    @property
    def timesteps(self):
        """The schedule's T."""
        return self.schedule.get("num_train_timesteps", 1000)


# What every recipe decides for itself (`Recipe.training`), besides its
# image size, schedule and U-Net: nothing of a preset's run comes from a
# fallback kept elsewhere.
TRAINING_SETTINGS = (
    "epochs",
    "batch_size",
    "learning_rate",
    "lr_schedule",
    "prediction_type",
    "ema_decay",
    "class_conditional",
    "class_dropout",
    "guidance_scale",
    "sampler",
    "sampling_steps",
    "num_samples",
    "jit_compile",
)


@dataclasses.dataclass(frozen=True)
class Preset:
    """A data set with its recipes: the settings measured to train on it.

    Args:
        name: str, the data set name `make_dataset` takes.
        channels: int, 1 (grayscale) or 3 (RGB).
        num_classes: int, the number of labels.
        flip: bool, whether random horizontal flips suit the data.
        recipes: dict of name -> `Recipe`; the first is the preset's own
            (a run's where a GPU is found).
        cpu_recipe: str or `None`, the recipe a run takes where no GPU is
            found; `None` for the first.

    Attributes:
        image_size, schedule, model, training: the first recipe's.
    """

    name: str
    channels: int
    num_classes: int
    flip: bool
    recipes: dict
    cpu_recipe: str | None = None

    @property
    def image_size(self):
        return self.main.image_size

    @property
    def schedule(self):
        return self.main.schedule

    @property
    def model(self):
        return self.main.model

    @property
    def training(self):
        return self.main.training

    @property
    def main(self):
        """The first recipe, the preset's own."""
        return next(iter(self.recipes.values()))

    def recipe_name(self, gpu):
        """The recipe a run takes where none is asked for: `cpu_recipe`
        where no GPU is found (`gpu` False), else the first."""
        if not gpu and self.cpu_recipe is not None:
            return self.cpu_recipe
        return next(iter(self.recipes))

    def to_dict(self):
        """Returns the preset as plain, JSON-serializable Python values."""
        return dataclasses.asdict(self)


# The image folders' settings on a GPU (measured on 32x32 emoji,
# docs/quality.md, "Image folders": v-prediction and the process's default
# sampler, DPM-Solver++ 2M in 20 steps, scored closer to held-out images than
# epsilon prediction and DDIM-50), which the presets without a measurement
# of their own on a GPU take too. A `sampler` of `None` is the process's
# default for the prediction type; `sampling_steps` go with a sampler given
# without them.
IMAGE_GPU_TRAINING = {
    "lr_schedule": "constant",
    "prediction_type": "v_prediction",
    "ema_decay": 0.999,
    "class_conditional": False,
    "class_dropout": 0.1,
    "guidance_scale": 1.0,
    "sampler": None,
    "sampling_steps": 20,
    "num_samples": 64,
    "jit_compile": "auto",
}


# A run of a few thousand steps on a CPU, measured on the digits
# (docs/quality.md, "What was decided": 2e-3 the best of three learning
# rates, guidance 2.0, v-prediction) and kept by MNIST's cpu recipe: a
# learning rate decayed to zero, an EMA that forgets in ~200 steps, class
# labels dropped one time in ten for guidance.
SHORT_CPU_TRAINING = {
    "learning_rate": 2e-3,
    "lr_schedule": "cosine",
    "prediction_type": "v_prediction",
    "ema_decay": 0.995,
    "class_conditional": True,
    "class_dropout": 0.1,
    "guidance_scale": 2.0,
}


def _linear_betas(num_train_timesteps):
    # DDPM's 1e-4..0.02 was chosen for T=1000; improved-diffusion scales both
    # ends by 1000/T so a shorter chain still ends in (almost) pure noise:
    # at T=200 unscaled betas leave sqrt(alphas_cumprod[-1]) ~ 0.37 of signal.
    scale = 1000 / num_train_timesteps
    return {
        "num_train_timesteps": num_train_timesteps,
        "beta_schedule": "linear",
        "beta_start": 1e-4 * scale,
        "beta_end": 0.02 * scale,
    }


def _tutorial(data):
    """The seed workload's recipe: the classic tutorial's DDPM on 32x32
    digits (T=200 linear betas, a U-Net of width 64 x (1, 2, 4, 8), 56.8 M
    parameters), on `data`."""
    return Recipe(
        image_size=32,
        schedule=_linear_betas(200),
        model={
            "widths": [64, 128, 256, 512],
            "num_res_blocks": 2,
            "attention_levels": [False, False, True, False],
        },
        training={
            "epochs": 20,
            "batch_size": 128,
            "learning_rate": 2e-4,
            **IMAGE_GPU_TRAINING,
        },
        measured=(
            f"the tutorial's model and schedule on {data}; v-prediction, "
            "EMA 0.999 and DPM-Solver++ 20 steps as the image folders' GPU "
            "defaults (measured on 32x32 emoji, not on this data)"
        ),
    )


def _cpu(measured):
    """The seed workload on two CPU cores: digits in 30 minutes (28x28, the
    data's own size; a 2.47 M U-Net of 3 levels without attention; class
    labels with guidance; 2 epochs of keras' 60,000 digits, 1,876 steps)."""
    return Recipe(
        image_size=28,
        schedule={"num_train_timesteps": 1000, "beta_schedule": "cosine"},
        model={
            "widths": [32, 64, 128],
            "num_res_blocks": 1,
            "attention_levels": [False, False, False],
        },
        training={
            "epochs": 2,
            "batch_size": 64,
            **SHORT_CPU_TRAINING,
            "sampler": None,
            "sampling_steps": 20,
            "num_samples": 100,
            "jit_compile": False,
        },
        measured=measured,
    )


# What chose the cpu recipe (docs/quality.md, "MNIST").
_MNIST_CPU = (
    "22 min on a 2-core CPU for its 1,875 steps (on 8,000 real digits; "
    "keras' 60,000 make the same steps in 2 epochs): FD/floor 2.00 against "
    "held-out digits, 0.89 of real's confident share, and 98% of guided "
    'samples read as their label (docs/quality.md, "MNIST")'
)

PRESETS = {
    # Tuned so that `python scripts/train.py` draws all ten digits in about
    # a minute on two CPU cores.
    "digits": Preset(
        name="digits",
        channels=1,
        num_classes=10,
        flip=False,
        recipes={
            "default": Recipe(
                image_size=16,
                schedule={"num_train_timesteps": 1000, "beta_schedule": "cosine"},
                model={
                    "widths": [16, 32, 64],
                    "num_res_blocks": 1,
                    "attention_levels": [False, False, False],
                },
                training={
                    "epochs": 25,
                    "batch_size": 64,
                    **SHORT_CPU_TRAINING,
                    "sampler": "ddim",
                    "sampling_steps": 50,
                    "num_samples": 100,
                    # XLA (DiffusionModel's default) runs this U-Net's step
                    # 1.19x faster on a 2-core CPU, but its compilation costs
                    # more than that saves in 725 steps: the whole run took
                    # 214 and 237 s with it against 161 s without, side by
                    # side (docs/benchmarks.md).
                    "jit_compile": False,
                },
                measured=(
                    "all ten digits in about a minute on two CPU cores: "
                    "FD/floor 1.4-1.5 at guidance 1 (docs/quality.md)"
                ),
            )
        },
    ),
    "mnist": Preset(
        name="mnist",
        channels=1,
        num_classes=10,
        flip=False,
        recipes={"tutorial": _tutorial("MNIST"), "cpu": _cpu(_MNIST_CPU)},
        cpu_recipe="cpu",
    ),
    "fashion_mnist": Preset(
        name="fashion_mnist",
        channels=1,
        num_classes=10,
        flip=False,
        recipes={
            "tutorial": _tutorial("Fashion-MNIST"),
            "cpu": _cpu(
                "MNIST's cpu recipe; not measured on Fashion-MNIST, whose "
                "textures may want more epochs"
            ),
        },
        cpu_recipe="cpu",
    ),
    # DDPM's CIFAR-10 model: 128 x (1, 2, 2, 2), attention at 16x16.
    "cifar10": Preset(
        name="cifar10",
        channels=3,
        num_classes=10,
        flip=True,
        recipes={
            "ddpm": Recipe(
                image_size=32,
                schedule=_linear_betas(1000),
                model={
                    "widths": [128, 256, 256, 256],
                    "num_res_blocks": 2,
                    "attention_levels": [False, True, False, False],
                },
                training={
                    "epochs": 200,
                    "batch_size": 128,
                    "learning_rate": 2e-4,
                    **IMAGE_GPU_TRAINING,
                },
                measured=(
                    "DDPM's CIFAR-10 U-Net and betas; v-prediction, EMA "
                    "0.999 and DPM-Solver++ 20 steps as the image folders' "
                    "GPU defaults (not measured on CIFAR-10)"
                ),
            )
        },
    ),
}
# Every recipe's name, for `--recipe`'s choices.
RECIPE_NAMES = tuple(dict.fromkeys(r for p in PRESETS.values() for r in p.recipes))
DEFAULT_DATASET = "digits"
# "folder" reads `data_dir`; it has no preset.
DATASET_NAMES = (*PRESETS, "folder")


def get_preset(name=DEFAULT_DATASET):
    """Returns a copy of the preset `name`, safe to modify.

    Args:
        name: one of `PRESETS`: `"digits"`, `"mnist"`, `"fashion_mnist"`,
            `"cifar10"`. Defaults to `"digits"`.
    """
    check_choice("name", name, PRESETS)
    return copy.deepcopy(PRESETS[name])
