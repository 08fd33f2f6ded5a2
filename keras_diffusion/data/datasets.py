"""`make_dataset`: the one entry point the scripts use, a preset's data set
(its first recipe's image size and batch size where not given) or an image
folder."""

from keras_diffusion.data.digits import load_digits
from keras_diffusion.data.directory import from_directory
from keras_diffusion.data.keras_datasets import from_keras_dataset
from keras_diffusion.data.presets import DATASET_NAMES, DEFAULT_DATASET, PRESETS
from keras_diffusion.utils.checks import check_choice


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
        batch_size: int, or `None` for the preset's first recipe's (64 for
            a folder). Defaults to `None`.
        data_dir: the image folder; required by, and only allowed with,
            `name="folder"`. Defaults to `None`.
        image_size: int or `None` for the preset's first recipe's (64 for
            a folder; a run on a CPU passes its cpu recipe's). Defaults to
            `None`.
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
