"""Data set presets and `make_dataset`, the one entry point the scripts use."""

import copy
import dataclasses

from keras_diffusion.data.digits import load_digits
from keras_diffusion.data.directory import from_directory
from keras_diffusion.data.keras_datasets import from_keras_dataset
from keras_diffusion.utils.checks import check_choice


@dataclasses.dataclass(frozen=True)
class Preset:
    """A data set with the settings suggested to train on it.

    Args:
        name: str, the data set name `make_dataset` takes.
        image_size: int, images are `image_size x image_size`.
        channels: int, 1 (grayscale) or 3 (RGB).
        num_classes: int, the number of labels.
        flip: bool, whether random horizontal flips suit the data.
        schedule: dict of `keras_diffusion.NoiseSchedule` kwargs.
        model: dict of `keras_diffusion.UNet` kwargs.
        training: dict of suggested training settings: `batch_size`,
            `learning_rate`, `epochs`, and optionally any other setting of
            `keras_diffusion.TrainConfig` (e.g. `prediction_type`).
    """

    name: str
    image_size: int
    channels: int
    num_classes: int
    flip: bool
    schedule: dict
    model: dict
    training: dict

    def to_dict(self):
        """Returns the preset as plain, JSON-serializable Python values."""
        return dataclasses.asdict(self)


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


_TUTORIAL = {
    "image_size": 32,
    "channels": 1,
    "num_classes": 10,
    "flip": False,
    # The classic tutorial setup: T=200 linear betas, width 64 x (1, 2, 4, 8).
    "schedule": _linear_betas(200),
    "model": {
        "widths": [64, 128, 256, 512],
        "num_res_blocks": 2,
        "attention_levels": [False, False, True, False],
    },
    "training": {"batch_size": 128, "learning_rate": 2e-4, "epochs": 20},
}

PRESETS = {
    # Tuned so that `python scripts/train.py` draws all ten digits in about
    # a minute on two CPU cores.
    "digits": Preset(
        name="digits",
        image_size=16,
        channels=1,
        num_classes=10,
        flip=False,
        schedule={"num_train_timesteps": 1000, "beta_schedule": "cosine"},
        model={
            "widths": [16, 32, 64],
            "num_res_blocks": 1,
            "attention_levels": [False, False, False],
        },
        training={
            "batch_size": 64,
            "learning_rate": 2e-3,
            "epochs": 25,
            "lr_schedule": "cosine",
            "prediction_type": "v_prediction",
            "ema_decay": 0.995,
            "class_conditional": True,
            "class_dropout": 0.1,
            "guidance_scale": 2.0,
            "sampler": "ddim",
            "sampling_steps": 50,
            "num_samples": 100,
            # XLA (DiffusionModel's default) runs this U-Net's step 1.19x
            # faster on a 2-core CPU, but its compilation costs more than
            # that saves in 725 steps: the whole run took 214 and 237 s with
            # it against 161 s without, side by side (docs/benchmarks.md).
            "jit_compile": False,
        },
    ),
    "mnist": Preset(name="mnist", **copy.deepcopy(_TUTORIAL)),
    "fashion_mnist": Preset(name="fashion_mnist", **copy.deepcopy(_TUTORIAL)),
    # DDPM's CIFAR-10 model: 128 x (1, 2, 2, 2), attention at 16x16.
    "cifar10": Preset(
        name="cifar10",
        image_size=32,
        channels=3,
        num_classes=10,
        flip=True,
        schedule=_linear_betas(1000),
        model={
            "widths": [128, 256, 256, 256],
            "num_res_blocks": 2,
            "attention_levels": [False, True, False, False],
        },
        training={"batch_size": 128, "learning_rate": 2e-4, "epochs": 200},
    ),
}
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


def _check_source(name, data_dir, channels, split, path, background, resize, cache):
    """Checks that the arguments fit the data set `name`, before any is read."""
    check_choice("name", name, DATASET_NAMES)
    if (name == "folder") != (data_dir is not None):
        raise ValueError(
            "Argument `data_dir` must be given exactly when name='folder'. "
            f"Received: name={name!r}, data_dir={data_dir!r}"
        )
    if name == "folder":
        return
    if background is not None or resize is not None or cache is not None:
        raise ValueError(
            "Arguments `background`, `resize` and `cache` are for an image folder "
            f"(name='folder'). Received: name={name!r}, background={background!r}, "
            f"resize={resize!r}, cache={cache!r}"
        )
    preset = PRESETS[name]
    if channels not in (None, preset.channels):
        raise ValueError(
            f"Argument `channels` must be None or {preset.channels} for "
            f"name={name!r}. Received: channels={channels!r}"
        )
    if name == "digits" and (split != "train" or path is not None):
        raise ValueError(
            "The digits data set has one split and no `path`. "
            f"Received: split={split!r}, path={path!r}"
        )


def _check_captions(name, caption_column):
    if caption_column is not None and name != "folder":
        raise ValueError(
            "Argument `caption_column` is for an image folder (name='folder'). "
            f"Received: name={name!r}, caption_column={caption_column!r}"
        )


def make_dataset(
    name=DEFAULT_DATASET,
    batch_size=None,
    *,
    data_dir=None,
    image_size=None,
    channels=None,
    with_labels=False,
    split="train",
    shuffle=True,
    flip=None,
    seed=None,
    drop_remainder=False,
    path=None,
    background=None,
    resize=None,
    verbose=False,
    cache=None,
    caption_column=None,
):
    """Builds the training pipeline for a named data set or an image folder.

    Args:
        name: a preset name (`"digits"`, `"mnist"`, `"fashion_mnist"`,
            `"cifar10"`) or `"folder"` to read `data_dir`.
            Defaults to `"digits"`.
        batch_size: int, or `None` for the preset's (64 for a folder).
            Defaults to `None`.
        data_dir: the image folder; required by, and only allowed with,
            `name="folder"`. Defaults to `None`.
        image_size: int or `None` for the preset's (64 for a folder).
            Defaults to `None`.
        channels: 1, 3 or `None` for the preset's (3 for a folder); only a
            folder can be read with other channels than its preset's.
            Defaults to `None`.
        with_labels: bool, yield `(images, labels)`; for a folder, each
            subfolder is a class. Defaults to `False`.
        split: `"train"` or `"test"` (keras data sets only). Defaults to
            `"train"`.
        shuffle: bool. Defaults to `True`.
        flip: bool, or `None` for the preset's (`False` for a folder).
            Defaults to `None`.
        seed: int or `None`. Defaults to `None`.
        drop_remainder: bool. Defaults to `False`.
        path: local `.npz` for a keras data set, see `from_keras_dataset`.
            Defaults to `None`.
        background: a folder's colour under transparency, see
            `from_directory`; `None` for white. Defaults to `None`.
        resize: a folder's `"crop"`, `"pad"` or `"stretch"`, see
            `from_directory`; `None` for crop. Defaults to `None`.
        verbose: bool, show a progress bar while a folder is decoded.
            Defaults to `False`.
        cache: a folder's decode cache folder, see `from_directory`; only
            with `name="folder"`. Defaults to `None`.
        caption_column: a folder's caption column (see `from_directory`), or
            `None` for images only. Defaults to `None`.

    Returns:
        A `tf.data.Dataset` of float32 batches in [-1, 1] (or `(images,
        labels)`, or `(images, captions)`) with a `class_names` attribute.

    Example:

    ```python
    preset = get_preset("digits")
    ds = make_dataset("digits", seed=0)  # (64, 16, 16, 1) batches
    ```
    """
    _check_source(name, data_dir, channels, split, path, background, resize, cache)
    _check_captions(name, caption_column)
    common = {"shuffle": shuffle, "seed": seed, "drop_remainder": drop_remainder}
    if name == "folder":
        return from_directory(
            data_dir,
            64 if batch_size is None else batch_size,
            64 if image_size is None else image_size,
            channels=3 if channels is None else channels,
            background="white" if background is None else background,
            resize="crop" if resize is None else resize,
            class_subfolders=with_labels,
            flip=bool(flip),
            verbose=verbose,
            cache=cache,
            caption_column=caption_column,
            **common,
        )
    preset = PRESETS[name]
    kwargs = {
        "batch_size": preset.training["batch_size"]
        if batch_size is None
        else batch_size,
        "image_size": preset.image_size if image_size is None else image_size,
        "with_labels": with_labels,
        "flip": preset.flip if flip is None else flip,
        **common,
    }
    if name == "digits":
        return load_digits(**kwargs)
    return from_keras_dataset(name, split=split, path=path, **kwargs)
