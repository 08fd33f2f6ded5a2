"""A text-to-image run: a folder whose `metadata.jsonl` (or `metadata.csv`)
captions its images trains a model conditioned on them.

The run builds a `TextConditioning` from its captions (its vocabulary), or
a frozen keras-hub CLIP (`--text-encoder keras-hub:PRESET`), and a U-Net
that attends to them; it records the vocabulary and its grids' prompts (a
spread of its distinct captions) in the run folder (`vocabulary.json` and
`prompts.json`, before `config.json`), so that a resumed run tokenizes and
samples as it began even when the captions have changed since.
"""

import dataclasses
import json
import os

import numpy as np

from keras_diffusion.conditioning import (
    TextConditioning,
    clip_conditioning,
    conditioned_on_text,
)
from keras_diffusion.conditioning.keras_hub_clip import check_preset
from keras_diffusion.data.captions import METADATA_FILES
from keras_diffusion.utils import files, images, run_files, settings
from keras_diffusion.utils.checks import check_float, check_int

# The rows of a text run's sample grids: one distinct caption each.
GRID_PROMPTS = 8
# The guidance of a text run's grids where none is given: the VP recipe's
# on the digits' labels (docs/quality.md); not yet measured on captions.
GUIDANCE_SCALE = 2.0
# The U-Net levels that attend to the text where none are given: the two
# lowest (8x8 and 4x4 of a 32x32 folder run), where attention is cheap.
CROSS_ATTENTION_LEVELS = 2
# As diffusers' train_text_to_image.py's common choice, and the label
# dropout of the class-conditional presets.
CAPTION_DROPOUT = 0.1
# The small encoder's transformer layers where `--text-depth` is not given:
# none. On the captioned emoji's held-out split it put the images of held-out
# captions in their category at a balanced 0.41 at guidance 2 (three judge
# seeds) where two layers (the text runs before `--text-depth`) gave 0.36,
# and carried more colour words to held-out objects (docs/quality.md, "Text").
TEXT_DEPTH = 0
# The depth of a text run whose config.json has no `text_depth`: a release
# before it built two layers.
EARLIER_TEXT_DEPTH = 2
# A text run's own settings on a machine without a GPU, where not given: a
# text step costs about twice an unconditional one, so it trains at 32x32,
# not the folder's 64x64 (docs/quality.md, "Text").
CPU_DEFAULTS = {"image_size": 32}
# `--text-encoder`'s form: keras-hub's CLIP preset (or a local preset
# folder) after the prefix.
KERAS_HUB = "keras-hub:"


def caption_column(config):
    """The caption column a resolved config reads, or `None` (images only:
    another dataset, or `--caption-column none`)."""
    if config.dataset != "folder" or config.caption_column == "none":
        return None
    return config.caption_column or "text"


def captioned(config):
    """Whether a resolved config trains on captions: a folder with a
    metadata file (read and checked with the images, before any write)."""
    if caption_column(config) is None or config.class_conditional:
        return False
    if not (config.data_dir and os.path.isdir(config.data_dir)):
        return False  # the data's checks name it
    for _, folders, names in os.walk(config.data_dir):
        # Hidden folders are skipped, as the listing skips them.
        folders[:] = [name for name in folders if not name.startswith(".")]
        if any(name in METADATA_FILES for name in names):
            return True
    return False


def resolve(config, given):
    """Fills a captioned run's caption column and dropout where not given
    (`text`, `CAPTION_DROPOUT`), and its attention levels where `given` (the
    config as the user gave it) has none: the U-Net attends to the text at
    its `CROSS_ATTENTION_LEVELS` lowest levels (and in its middle block). A
    run on other data keeps the caption settings `None`, as the config.json
    of runs before captions has them. Refuses a caption dropout the run has
    no captions for, or out of [0, 1)."""
    if not captioned(config):
        for name in ("caption_dropout", "text_encoder", "text_depth"):
            value = getattr(config, name)
            if value is not None:
                raise ValueError(
                    f"Argument `{name}` (--{name.replace('_', '-')}) needs a "
                    "captioned image folder (its metadata.jsonl or "
                    f"metadata.csv). Received: {name}={value!r}, "
                    f"dataset={config.dataset!r}, data_dir={config.data_dir!r}"
                )
        return
    config.caption_column = caption_column(config)
    _resolve_text_depth(config)
    if given.attention_levels is None and given.init_from is None:
        levels = len(config.widths)
        config.attention_levels = [
            level >= levels - CROSS_ATTENTION_LEVELS for level in range(levels)
        ]
    dropout = (
        CAPTION_DROPOUT if config.caption_dropout is None else config.caption_dropout
    )
    config.caption_dropout = check_float("caption_dropout", dropout, 0.0, less_than=1.0)


def _resolve_text_depth(config):
    """`TEXT_DEPTH` where `--text-depth` is not given, checked; `None` with a
    keras-hub encoder (`--text-encoder`), whose depth is its preset's."""
    if text_encoder_preset(config.text_encoder) is not None:
        if config.text_depth is not None:
            raise ValueError(
                "Argument `text_depth` (--text-depth) sets the small encoder "
                "trained with the model; a keras-hub encoder (--text-encoder) "
                "has its preset's layers. Received: "
                f"text_depth={config.text_depth!r}, "
                f"text_encoder={config.text_encoder!r}"
            )
        return
    depth = TEXT_DEPTH if config.text_depth is None else config.text_depth
    config.text_depth = check_int("text_depth", depth, 0)


def _saved_text_run(saved):
    """Whether a flat config.json is a text run's: a caption column."""
    return saved.get("caption_column") not in (None, "none")


def upgrade(saved):
    """A flat config.json of an earlier release as this one records the same
    run: a text run of the small encoder without `text_depth` had two layers
    (`EARLIER_TEXT_DEPTH`)."""
    if (
        "text_depth" not in saved
        and _saved_text_run(saved)
        and saved.get("text_encoder") is None
    ):
        return {**saved, "text_depth": EARLIER_TEXT_DEPTH}
    return saved


def defaults(gpu):
    """A captioned folder's defaults over the folder's: its grids'
    `GUIDANCE_SCALE`, and `CPU_DEFAULTS` where `gpu` is False."""
    return {"guidance_scale": GUIDANCE_SCALE, **({} if gpu else CPU_DEFAULTS)}


def resumed_text_run(config, output_dir, overwrite=False):
    """`config` as the interrupted text run in `output_dir` began, where the
    same command leaves a setting to its default that an earlier release
    resolved otherwise: the small encoder's `EARLIER_TEXT_DEPTH` (its
    config.json without `text_depth`), and the `CPU_DEFAULTS`' settings it
    recorded (a release before them trained at the folder's 64x64)."""
    if overwrite or not captioned(config):
        return config
    if os.path.exists(os.path.join(output_dir, run_files.MODEL_FILE)):
        return config  # finished: refused as such
    saved = settings.flat(
        files.read_json(os.path.join(output_dir, run_files.CONFIG_FILE))
    )
    if saved is None or not _saved_text_run(saved):
        return config
    began = {
        name: saved[name]
        for name in CPU_DEFAULTS
        if getattr(config, name) is None and saved.get(name) is not None
    }
    if config.text_depth is None and "text_depth" not in saved:
        if "text_depth" in upgrade(saved):
            began["text_depth"] = EARLIER_TEXT_DEPTH
    return dataclasses.replace(config, **began) if began else config


def from_checkpoint(config, model):
    """The text settings an `init_from` checkpoint's `model` fixes: a text
    model's encoder depth, for a run on captioned data (its encoder and
    vocabulary are the checkpoint's, `build_conditioning`). Refuses, before
    anything is written, a checkpoint that does not fit the data (a text
    model without captions, captions for a model without text), a text
    setting the checkpoint fixes otherwise, and a keras-hub encoder's run."""
    text_model, source = conditioned_on_text(model), config.init_from
    on_captions = captioned(config)  # walks the data folder: once
    if on_captions and not text_model:
        raise ValueError(
            "Argument `init_from` (--init-from) holds a model without text, "
            "and the data is captioned: pass --caption-column none to train "
            f"it on the images alone. Received: init_from={source!r}, "
            f"data_dir={config.data_dir!r}"
        )
    if not text_model:
        return {}
    if not on_captions:
        raise ValueError(
            "Argument `init_from` (--init-from) holds a text model, which "
            "trains on captioned images (--data-dir FOLDER with a "
            f"metadata.jsonl). Received: init_from={source!r}, "
            f"dataset={config.dataset!r}, data_dir={config.data_dir!r}, "
            f"caption_column={config.caption_column!r}"
        )
    if not isinstance(model.conditioning, TextConditioning):
        raise ValueError(
            "Argument `init_from` (--init-from) holds a text model of a frozen "
            "encoder (--text-encoder); only the small encoder trained with "
            f"the model is taken yet. Received: init_from={source!r}"
        )
    depth = model.conditioning.depth
    for name, own in (("text_encoder", None), ("text_depth", depth)):
        given = getattr(config, name)
        if given is not None and given != own:
            raise ValueError(
                f"Argument `{name}` (--{name.replace('_', '-')}) differs from "
                f"the text encoder of init_from={source!r} ({name}={own!r}), "
                f"which the run keeps; drop it. Received: {name}={given!r}"
            )
    return {"text_depth": depth}


def text_encoder_preset(value):
    """The keras-hub CLIP preset of `--text-encoder keras-hub:PRESET`
    (checked: keras-hub installed, the preset known or a local folder), or
    `None` for the small encoder trained with the model (`None`)."""
    if value is None:
        return None
    preset = value[len(KERAS_HUB) :] if isinstance(value, str) else None
    if preset is None or not value.startswith(KERAS_HUB) or not preset:
        raise ValueError(
            "Argument `text_encoder` (--text-encoder) must be keras-hub:PRESET, "
            "a keras-hub CLIP preset, or not given (the small encoder trained "
            f"with the model). Received: text_encoder={value!r}"
        )
    return check_preset(preset, "text_encoder", value)


def build_conditioning(config, captions, source=None):
    """The run's text conditioning: a frozen keras-hub CLIP of
    `--text-encoder keras-hub:PRESET`, a copy of `source` (an `init_from`
    checkpoint's `TextConditioning`: its vocabulary and weights), else a
    `TextConditioning`, its vocabulary from `captions` (the data's); its
    caption dropout the config's."""
    if source is not None:
        conditioning = TextConditioning.from_config(
            {**source.get_config(), "dropout": config.caption_dropout}
        )
        conditioning.build()
        conditioning.set_weights(source.get_weights())
        return conditioning
    preset = text_encoder_preset(config.text_encoder)
    if preset is not None:
        return clip_conditioning(preset, dropout=config.caption_dropout)
    conditioning = TextConditioning(
        depth=config.text_depth, dropout=config.caption_dropout
    )
    conditioning.adapt(list(captions))
    if conditioning.vocabulary is None:
        raise ValueError(
            "The captions hold no word (each is empty or punctuation), so a "
            "text model has nothing to learn from them. Received: "
            f"data_dir={config.data_dir!r}, caption_column={config.caption_column!r}"
        )
    return conditioning


def write_vocabulary(run, model):
    """Records a text model's vocabulary in the run folder (atomically)."""
    if conditioned_on_text(model) and model.conditioning.vocabulary is not None:
        path = run.file(run_files.VOCABULARY_FILE)
        with files.atomic_write(path) as tmp:
            with open(tmp, "w") as f:
                json.dump(model.conditioning.vocabulary, f, indent=0)


def restore_vocabulary(run, model):
    """A resumed text model tokenizes as its run began: the recorded
    vocabulary, where the run folder has one."""
    path = run.file(run_files.VOCABULARY_FILE)
    if (
        conditioned_on_text(model)
        and model.conditioning.vocabulary is not None
        and os.path.exists(path)
    ):
        with open(path) as f:
            model.conditioning.set_vocabulary(json.load(f))


def write_prompts(run, prompts):
    """Records a text run's grid prompts (`run_prompts`) in the run folder,
    atomically; nothing for a run without them (`None`)."""
    if prompts is not None:
        with files.atomic_write(run.file(run_files.RUN_PROMPTS_FILE)) as tmp:
            with open(tmp, "w") as f:
                json.dump(list(prompts), f, indent=0)


def restore_prompts(run, prompts):
    """The grid prompts a resumed text run began with: those recorded in the
    run folder, else `prompts` (the data's now; a run folder of an earlier
    release recorded none)."""
    path = run.file(run_files.RUN_PROMPTS_FILE)
    if prompts is None or not os.path.exists(path):
        return prompts
    with open(path) as f:
        return [str(prompt) for prompt in json.load(f)]


def prompts_under_controls(captions, controls, num_samples, count=GRID_PROMPTS):
    """A text ControlNet's grid: `(controls, prompts)`, the first `count`
    `captions` (a batch's, `tf.string`) as its prompts, a row each as
    `grid_prompts` lays them out, each row drawn under the control of the
    image it captions (`controls`, the batch's, one a grid image)."""
    prompts = [caption.decode("utf-8") for caption in captions.numpy()[:count]]
    which, _ = images.grid_prompts(list(range(len(prompts))), num_samples)
    return np.asarray(controls)[which], prompts


def run_prompts(captions, count=GRID_PROMPTS):
    """`count` distinct captions spread evenly over the sorted distinct
    captions of the data (all of them when fewer): the run's prompts;
    `None` for data without captions (`captions` `None`)."""
    if captions is None:
        return None
    distinct = sorted(set(str(caption) for caption in captions))
    if len(distinct) <= count:
        return distinct
    step = len(distinct) / count
    return [distinct[int(i * step)] for i in range(count)]
