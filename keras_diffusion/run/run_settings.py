"""A training run's own settings, declared once: its data, network, the
choice of its process, its training and the run's outputs.

Each `Setting` is a `TrainConfig` field (its default the field's; `None`
takes the dataset preset's), a flag of `scripts/train.py` with its help,
grouped in `--help` by its section, a key of that section in the run
folder's `config.json` and a row of docs/flags.md. The process's own
settings are its class's (`Process.settings`, schedules/); `TRAIN_ARGUMENTS`
are `train()`'s arguments beside the config (where the run is written).
"""

import argparse

from keras_diffusion import data as data_lib
from keras_diffusion.conditioning.control import EXTRACTORS
from keras_diffusion.data import decode
from keras_diffusion.distribute.strategy import STRATEGY_NAMES
from keras_diffusion.models.unet_sizes import MODEL_SIZES
from keras_diffusion.samplers import SAMPLERS
from keras_diffusion.utils.settings import (
    Setting,
    parse_bool_list,
    parse_bool_or_auto,
    parse_int_list,
    parse_int_or_auto,
)

# A training run's own choices.
LR_SCHEDULES = ("constant", "cosine")
# The Keras dtype policy of each `--mixed-precision`, and so its choices.
PRECISION_POLICIES = {
    "none": "float32",
    "float16": "mixed_float16",
    "bfloat16": "mixed_bfloat16",
}
MIXED_PRECISION = tuple(PRECISION_POLICIES)
# A ControlNet's control made of each training image (conditioning/control).
CONTROLS = tuple(EXTRACTORS)
# Latent diffusion: "sd-vae" is keras-cv's Stable Diffusion VAE (keras-cv extra).
LATENTS = ("none", "sd-vae")


def parse_background(text):
    """`white`, `black` or `R,G,B` (0..255 each), as config.json names it."""
    try:
        return decode.background_name(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected white, black or R,G,B with values in 0..255, got {text!r}"
        ) from None


def _data(name, type=str, default=None, choices=None, help="", **options):
    return Setting(name, type, default, choices, help, "data", **options)


def _network(name, type=str, default=None, choices=None, help="", **options):
    return Setting(name, type, default, choices, help, "network", **options)


def _training(name, type=str, default=None, choices=None, help="", **options):
    return Setting(name, type, default, choices, help, "training", **options)


def _run(name, type=str, default=None, choices=None, help="", **options):
    return Setting(name, type, default, choices, help, "run", **options)


RUN_SETTINGS = (
    _data(
        "dataset",
        default=data_lib.DEFAULT_DATASET,
        choices=data_lib.DATASET_NAMES,
        help="training data; digits ships with the package (no download); "
        "folder where only --data-dir is given",
    ),
    _data(
        "recipe",
        choices=data_lib.RECIPE_NAMES,
        help="the dataset preset's recipe, its measured settings (docs/flags.md, "
        "'Presets'): mnist and fashion_mnist have tutorial (the classic DDPM: "
        "32x32, T=200, a 56.8 M U-Net; for a GPU) and cpu (digits in 30 "
        "minutes on two cores); where not given, cpu where no GPU is found, "
        "else the preset's first",
    ),
    _data(
        "data_dir",
        help="image folder for --dataset folder, which it implies (class "
        "subfolders with --class-conditional)",
    ),
    _data(
        "data_path",
        help="for mnist/fashion_mnist/cifar10, a local copy read instead of "
        "downloading: an .npz with arrays x_train, y_train, x_test, y_test "
        "(keras' mnist.npz), or a folder of the four idx files of the MNIST "
        "download (train-images-idx3-ubyte, ...; .gz or not)",
        flag_options={"metavar": "FILE.npz|FOLDER"},
    ),
    _data(
        "caption_column",
        help="--dataset folder: the captions' column of its metadata.jsonl "
        "or metadata.csv (Hugging Face's imagefolder: file_name and a "
        "caption each line); a folder with one trains a text-to-image model "
        "(text where not given; none: its images alone)",
    ),
    _data("image_size", int, help="images are resized to this"),
    _data(
        "channels",
        int,
        choices=(1, 3),
        help="1 (greyscale) or 3 (RGB) (--dataset folder)",
    ),
    _data(
        "background",
        parse_background,
        help="white, black or R,G,B: the colour under transparent pixels "
        f"(--dataset folder; {decode.DEFAULT_BACKGROUND} where not given)",
    ),
    _data(
        "resize",
        choices=decode.RESIZE_MODES,
        help="images of another aspect ratio: centre crop, pad with the "
        "background, or stretch (--dataset folder; "
        f"{decode.DEFAULT_RESIZE} where not given)",
    ),
    _data(
        "latent",
        default="none",
        choices=LATENTS,
        help="sd-vae: train on keras-cv's Stable Diffusion VAE latents (RGB, "
        '--image-size a multiple of 64; pip install ".[keras-cv]")',
    ),
    _data(
        "autoencoder_weights",
        help="with --latent: keras-cv (download, the default), random, or "
        "local files ENC.h5,DEC.h5 (vae_encoder.h5,kcv_decoder.h5)",
    ),
    _network(
        "model_size",
        choices=MODEL_SIZES,
        help="U-Net size for the image size (parameters: README); --widths, "
        "--num-res-blocks, --attention-levels override it (a folder: tiny on "
        "a CPU, base on a GPU)",
    ),
    _network(
        "widths", parse_int_list, help="U-Net channels per level, comma-separated"
    ),
    _network("num_res_blocks", int, help="residual blocks per level"),
    _network(
        "attention_levels",
        parse_bool_list,
        help="self-attention per level, comma-separated true/false",
    ),
    _network(
        "text_encoder",
        help="a captioned folder's text encoder: keras-hub:PRESET, keras-hub's "
        "CLIP frozen (clip_vit_large_patch14, ...: docs/text.md; or a local "
        'preset folder; pip install ".[keras-hub]"), its embeddings computed '
        "once per caption; the small encoder trained with the model where not "
        "given",
        flag_options={"metavar": "keras-hub:PRESET"},
    ),
    _network(
        "text_depth",
        int,
        help="a captioned folder's small text encoder: its transformer layers "
        "(0: each word's embedding and its position, which carries colour "
        'words to new objects best: docs/quality.md, "Text"); 0 where not '
        "given",
    ),
    _network(
        "class_conditional",
        bool,
        help="train on labels for classifier-free guidance (true/false)",
    ),
    _network(
        "init_from",
        help="fine-tune from a checkpoint: a diffusers folder or Hub id "
        "(UNet2DModel), a .keras file or a run folder; keeps its architecture, "
        "image size and, unless a process flag is given, its process (a text "
        "run's: its encoder and vocabulary, on a captioned --data-dir); "
        "keras-hub:PRESET "
        "(a keras-hub SD3 preset or local preset folder) fine-tunes Stable "
        "Diffusion 3 on a captioned --data-dir (docs/keras_hub.md)",
        flag_options={"metavar": "SOURCE"},
    ),
    _network(
        "change_schedule",
        bool,
        False,
        help="with --init-from: let --process (or --schedule) change the "
        "checkpoint's process (VP to EDM or back), which feeds its network "
        "inputs it never learned",
    ),
    Setting(
        "process",
        help="the forward process and objective (its settings: the groups "
        "'process: NAME'); the preset's vp where not given",
    ),
    Setting(
        "schedule",
        help="--beta-schedule or --process in one flag: a beta schedule (then "
        "--process vp), or another process",
    ),
    _training("epochs", int, help="passes over the data"),
    _training("batch_size", int, help="global batch size (split over replicas)"),
    _training("learning_rate", float, help="Adam's (peak) learning rate"),
    _training(
        "lr_schedule",
        choices=LR_SCHEDULES,
        help="cosine decays the learning rate to 0 over the run",
    ),
    _training("ema_decay", float, help="EMA of the weights"),
    _training(
        "class_dropout", float, help="probability of dropping a label in training"
    ),
    _training(
        "caption_dropout",
        float,
        help="probability of training on the empty prompt in place of a "
        "caption, which guidance on prompts needs (a captioned folder)",
    ),
    _training(
        "mixed_precision",
        default="none",
        choices=MIXED_PRECISION,
        help="compute dtype; float16 comes with loss scaling",
        flag_options={"nargs": "?", "const": "float16"},
    ),
    _training(
        "jit_compile",
        parse_bool_or_auto,
        help="XLA: true, false or auto (on, but under --strategy); false "
        "starts faster, auto runs faster",
    ),
    _training(
        "steps_per_execution",
        parse_int_or_auto,
        "auto",
        help="training steps per compiled call; auto: 8 with XLA or a GPU, else 1",
    ),
    _training(
        "grad_accum",
        int,
        1,
        help="batches a weight update: one update every K batches on their "
        "mean gradient, as one batch of K x --batch-size",
    ),
    _training(
        "lora_rank",
        int,
        help="train low-rank adapters (LoRA) of rank R of the U-Net's "
        "convolutions, dense layers and attention projections, and no other "
        "weight (with --init-from, or on a fresh model; an SD3 preset's: its "
        "MMDiT's attention projections)",
        flag_options={"metavar": "R"},
    ),
    _training(
        "control",
        choices=CONTROLS,
        help="train a ControlNet of the --init-from run's U-Net (frozen) on "
        "a control made of each training image: silhouette (the pixels away "
        "from the background) or edges (Sobel); sample.py RUN --control-images "
        "DIR draws under given controls",
    ),
    _training(
        "remat",
        bool,
        False,
        help="recompute each U-Net block in the backward pass instead of "
        "keeping its activations: lower peak memory, more compute, the same "
        "result",
    ),
    _training(
        "posthoc_ema",
        bool,
        False,
        help="also track EDM2's power-function EMA profiles and snapshot them "
        "in <output-dir>/posthoc_ema, to choose the EMA length after training "
        "(scripts/posthoc_ema.py)",
    ),
    _training(
        "posthoc_snapshots",
        int,
        16,
        help="--posthoc-ema: snapshots over the run (each 2 copies of the "
        "U-Net's weights)",
    ),
    _training("seed", int, 0, help="seeds everything"),
    _training("strategy", default="none", choices=STRATEGY_NAMES, help="tf.distribute"),
    _run("sampler", choices=tuple(SAMPLERS), help="sampler of the grid"),
    _run("sampling_steps", int, help="steps of the sampler"),
    _run(
        "guidance_scale",
        float,
        help="classifier-free guidance of the grid (class-conditional and text models)",
    ),
    _run("num_samples", int, help="images in samples.png"),
    _run(
        "sample_every",
        int,
        0,
        help="also write samples/epoch_NNNN.png every N epochs (0: never)",
    ),
    _run(
        "checkpoint_every",
        int,
        5,
        help="save model.keras every N epochs (and at the end)",
    ),
    _run("tensorboard", bool, False, help="log to <output-dir>/tensorboard"),
)

# `train()`'s arguments beside the config: where the run is written and how
# often its resume state is; flags of `scripts/train.py`, not recorded in
# config.json.
TRAIN_ARGUMENTS = (
    _data(
        "cache_dir",
        default="auto",
        help="--dataset folder: decode the images once into a memory-mapped "
        "cache in DIR and read it on every later run; auto: <output-dir>/cache "
        "(kept after the run and by --overwrite); none: decode into memory",
        flag_options={"metavar": "DIR"},
    ),
    _run("output_dir", help="the run folder (runs/<dataset> where not given)"),
    _run("overwrite", bool, False, help="replace a finished run there"),
    _run(
        "backup_every_steps",
        int,
        help="also write the resume state (backup/) every N optimizer steps, "
        "besides every epoch (None: every epoch only)",
        flag_options={"metavar": "N"},
    ),
    _run(
        "backup_every_minutes",
        float,
        help="also write the resume state at the first step boundary once M "
        "minutes have passed since the last write (e.g. 10 on Colab or Kaggle)",
        flag_options={"metavar": "M"},
    ),
)
