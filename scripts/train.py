"""Train a diffusion model; with no arguments, on the embedded digits.

    python scripts/train.py                       # digits, 16x16, a few minutes
    python scripts/train.py --process edm         # digits, EDM training, Heun grid
    python scripts/train.py --process flow        # digits, flow matching
    python scripts/train.py --beta-schedule linear --prediction-type epsilon
    python scripts/train.py --dataset folder --data-dir my_images/ --image-size 64
    python scripts/train.py --dataset folder --data-dir my_images/ --image-size 256 \
        --latent sd-vae --autoencoder-weights vae_encoder.h5,kcv_decoder.h5

Writes a run folder (default `runs/<dataset>`): `model.keras`, `samples.png`,
`config.json`, `log.csv`. Running the same command again after a crash
resumes the run; a finished run is replaced only with `--overwrite`.

SIGTERM or SIGINT (Ctrl-C) writes the resume state at the next step boundary
and exits with status 75; the same command then resumes in the middle of the
epoch, with the uninterrupted run's data order and result. A second signal
exits at once. Exit status: 0 done, 2 bad input, 3 non-finite loss, 75
stopped by a signal (resumable).
Settings left unset come from the dataset's preset
(`keras_diffusion.data.PRESETS`).
"""

import argparse
import functools
import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

# Nothing here imports TensorFlow before the flags are parsed: a mistyped
# flag is answered at once, without TensorFlow's start-up lines.
import _startup  # noqa: E402

_startup.quiet_environment()
CHOICES = _startup.CHOICES

# The flags, by group: each is a `TrainConfig` field, and its default is the
# field's; a field defaulting to `None` takes the dataset preset's value.
FLAGS = {
    "data": {
        "dataset": {
            "choices": CHOICES["dataset"],
            "help": "training data; digits ships with the package (no download)",
        },
        "data_dir": {
            "help": "image folder for --dataset folder (class subfolders with "
            "--class-conditional)",
        },
        "data_path": {
            "help": "for mnist/fashion_mnist/cifar10, a local .npz read instead "
            "of downloading",
        },
        "image_size": {"type": int, "help": "images are resized to this"},
        "channels": {
            "type": int,
            "choices": [1, 3],
            "help": "1 (greyscale) or 3 (RGB) (--dataset folder)",
        },
        "background": {
            "type": _startup.background,
            "help": "white, black or R,G,B: the colour under transparent pixels "
            "(--dataset folder)",
        },
        "resize": {
            "choices": CHOICES["resize"],
            "help": "images of another aspect ratio: centre crop, pad with the "
            "background, or stretch (--dataset folder)",
        },
    },
    "training": {
        "epochs": {"type": int, "help": "passes over the data"},
        "batch_size": {"type": int, "help": "global batch size (split over replicas)"},
        "learning_rate": {"type": float, "help": "Adam's (peak) learning rate"},
        "lr_schedule": {
            "choices": CHOICES["lr_schedule"],
            "help": "cosine decays the learning rate to 0 over the run",
        },
        "ema_decay": {"type": float, "help": "EMA of the weights"},
        "posthoc_ema": {
            "action": "store_true",
            "help": "also track EDM2's power-function EMA profiles and snapshot "
            "them in <output-dir>/posthoc_ema, to choose the EMA length after "
            "training (scripts/posthoc_ema.py)",
        },
        "posthoc_snapshots": {
            "type": int,
            "help": "--posthoc-ema: snapshots over the run (each 2 copies of the "
            "U-Net's weights)",
        },
        "mixed_precision": {
            "nargs": "?",
            "const": "float16",
            "choices": CHOICES["mixed_precision"],
            "help": "compute dtype; float16 comes with loss scaling",
        },
        "jit_compile": {
            "type": _startup.bool_or_auto,
            "help": "XLA: true, false or auto (on, but under --strategy); "
            "false starts faster, auto runs faster",
        },
        "steps_per_execution": {
            "type": _startup.int_or_auto,
            "help": "training steps per compiled call; auto: 8 with XLA or "
            "a GPU, else 1",
        },
        "grad_accum": {
            "type": int,
            "help": "batches a weight update: one update every K batches on "
            "their mean gradient, as one batch of K x --batch-size",
        },
        "lora_rank": {
            "type": int,
            "metavar": "R",
            "help": "train low-rank adapters (LoRA) of rank R of the U-Net's "
            "convolutions, dense layers and attention projections, and no "
            "other weight (with --init-from, or on a fresh model)",
        },
        "remat": {
            "action": "store_true",
            "help": "recompute each U-Net block in the backward pass instead of "
            "keeping its activations: lower peak memory, more compute, the "
            "same result",
        },
        "seed": {"type": int, "help": "seeds everything"},
        "strategy": {
            "choices": CHOICES["strategy"],
            "help": "tf.distribute strategy",
        },
    },
    "diffusion and model": {
        "init_from": {
            "metavar": "SOURCE",
            "help": "fine-tune from a checkpoint: a diffusers folder or Hub id "
            "(UNet2DModel), or a .keras file; keeps its architecture, image size "
            "and, unless a process flag is given, its process",
        },
        "change_schedule": {
            "action": "store_true",
            "help": "with --init-from: let --process (or --schedule) change the "
            "checkpoint's process (VP to EDM or back), which feeds its network "
            "inputs it never learned",
        },
        "model_size": {
            "choices": CHOICES["model_size"],
            "help": "U-Net size for the image size (parameters: README); "
            "--widths, --num-res-blocks, --attention-levels override it",
        },
        "process": {
            "choices": CHOICES["process"],
            "help": "the forward process and objective: vp (variance preserving "
            "betas, --beta-schedule, --prediction-type), edm (Karras et al., "
            "2022; Heun-18 grid by default), flow (flow matching, as SD3; "
            "the U-Net predicts the velocity; DPM-Solver++ 16 grid by default) "
            "or consistency (few steps: images in 1 or 2 model calls; "
            "a 2-call grid by default)",
        },
        "beta_schedule": {
            "choices": CHOICES["beta_schedule"],
            "help": "--process vp: its betas (the preset's: cosine)",
        },
        "schedule": {
            "choices": CHOICES["schedule"],
            "help": "--beta-schedule or --process in one flag: a beta schedule "
            "(then --process vp), or edm, flow or consistency",
        },
        "timesteps": {"type": int, "help": "T, diffusion steps"},
        "prediction_type": {
            "choices": CHOICES["prediction_type"],
            "help": "what the U-Net predicts",
        },
        "loss_weighting": {
            "choices": CHOICES["loss_weighting"],
            "help": "min_snr: Min-SNR-5 loss weights",
        },
        "sigma_data": {
            "type": float,
            "help": "--process edm: the data's standard deviation (measured "
            "on its first batches; 0.5 on latents)",
        },
        "sigma_min": {"type": float, "help": "--process edm: smallest sigma (0.002)"},
        "sigma_max": {"type": float, "help": "--process edm: largest sigma (80)"},
        "rho": {"type": float, "help": "--process edm: Karras spacing exponent (7)"},
        "p_mean": {
            "type": float,
            "help": "--process edm: mean of training log-sigma (-0.6; "
            "Karras et al.'s -1.2 spends a short run on low noise)",
        },
        "p_std": {
            "type": float,
            "help": "--process edm: std of training log-sigma (1.2)",
        },
        "shift": {
            "type": float,
            "help": "--process flow|consistency: timestep shift, > 1 moves the noise "
            "levels toward noise (1.0; SD3 uses 3.0)",
        },
        "timestep_sampling": {
            "choices": CHOICES["timestep_sampling"],
            "help": "--process flow|consistency: how training draws noise "
            "levels (logit_normal)",
        },
        "logit_mean": {
            "type": float,
            "help": "--process flow|consistency: mean of the logit-normal draw (0.0)",
        },
        "logit_std": {
            "type": float,
            "help": "--process flow|consistency: std of the logit-normal draw (1.0)",
        },
        "consistency_training": {
            "choices": CHOICES["consistency_training"],
            "help": "--process consistency: the derivative of its target by a "
            "second call (discrete) or forward-mode autodiff (continuous; "
            "--timesteps defaults to 10 for it, and a larger one warns: at 1000 "
            "it does not train)",
        },
        "curriculum_steps": {
            "type": int,
            "help": "--process consistency: updates over which training moves "
            "from flow matching to consistency (the whole run)",
        },
        "curriculum_stages": {
            "type": int,
            "help": "--process consistency: stages of that curriculum, 1 to 20 "
            "(float32 resolves no finer gap) (8)",
        },
        "widths": {
            "type": _startup.int_list,
            "help": "U-Net channels per level, comma-separated",
        },
        "num_res_blocks": {"type": int, "help": "residual blocks per level"},
        "attention_levels": {
            "type": _startup.bool_list,
            "help": "self-attention per level, comma-separated true/false",
        },
        "class_conditional": {
            "type": _startup.strict_bool,
            "nargs": "?",
            "const": True,
            "help": "train on labels for classifier-free guidance (true/false)",
        },
        "class_dropout": {
            "type": float,
            "help": "probability of dropping a label in training",
        },
    },
    "output": {
        "sampler": {
            "choices": CHOICES["sampler"],
            "help": "sampler of the grid",
        },
        "sampling_steps": {"type": int, "help": "steps of the sampler"},
        "guidance_scale": {
            "type": float,
            "help": "classifier-free guidance of the grid (class-conditional models)",
        },
        "num_samples": {"type": int, "help": "images in samples.png"},
        "sample_every": {
            "type": int,
            "help": "also write samples/epoch_NNNN.png every N epochs (0: never)",
        },
        "checkpoint_every": {
            "type": int,
            "help": "save model.keras every N epochs (and at the end)",
        },
        "tensorboard": {
            "action": "store_true",
            "help": "log to <output-dir>/tensorboard",
        },
    },
    'latent diffusion (pip install ".[keras-cv]")': {
        "latent": {
            "choices": CHOICES["latent"],
            "help": "sd-vae: train on keras-cv's Stable Diffusion VAE latents "
            "(RGB, --image-size a multiple of 64)",
        },
        "autoencoder_weights": {
            "help": "with --latent: keras-cv (download, the default), random, "
            "or local files ENC.h5,DEC.h5 (vae_encoder.h5,kcv_decoder.h5)",
        },
    },
}
RUN_FLAGS = (
    "output_dir",
    "overwrite",
    "debug_nan_at_step",
    "cache_dir",
    "backup_every_steps",
    "backup_every_minutes",
    "imports",
)


def _nan_at_step(step):
    """A callback that makes the loss of optimizer step `step` (1-based) NaN,
    deterministically, by poisoning one weight just before it: the hook behind
    the hidden `--debug-nan-at-step`, with which tests check the
    non-finite-loss stop."""
    import keras

    class NaNAtStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            done = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            if done + 1 == step:
                weight = self.model.denoiser.trainable_variables[0]
                weight.assign(keras.ops.full(weight.shape, float("nan"), weight.dtype))

    return NaNAtStep()


class _Shown:
    """A default shown in --help that stands for "not given" (argparse leaves
    non-string defaults unconverted)."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


@functools.cache
def _field_defaults():
    """`(TrainConfig(), its digits resolution)`: what --help shows as defaults
    (the one part of the parser that needs TensorFlow, loaded for --help)."""
    _startup.import_tensorflow()
    from keras_diffusion.run import config

    return config.TrainConfig(), config.TrainConfig().resolve()


class _Default:
    """The default of a `TrainConfig` flag: not given, so the field's own (or
    the dataset preset's, for a field defaulting to `None`). Shown in --help
    as the field's default, or the digits preset's value."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        fields, digits = _field_defaults()
        value, preset = getattr(fields, self.name), getattr(digits, self.name)
        if value is not None or preset is None:
            return str(value)
        if isinstance(preset, list):
            preset = ",".join(str(v).lower() for v in preset)
        return f"the dataset's preset; digits: {preset}"


# Flags that apply to an image folder, or mean "the preset's" when unset.
_FOLDER_DEFAULTS = {
    "background": _Shown(f"{_startup.DEFAULT_BACKGROUND} (a folder only)"),
    "resize": _Shown(f"{_startup.DEFAULT_RESIZE} (a folder only)"),
    "model_size": _Shown("the preset's model; a folder: tiny on a CPU, base on a GPU"),
}


def _defaults():
    """Each flag's default: a `_Default`, or what a folder-only flag shows."""
    names = (name for flags in FLAGS.values() for name in flags)
    return {name: _FOLDER_DEFAULTS.get(name) or _Default(name) for name in names}


def build_parser():
    parser = _startup.new_parser(
        __doc__,
        epilog="Flags defaulting to the dataset's preset take the values of "
        "keras_diffusion.data.PRESETS. SIGTERM or SIGINT writes the resume state "
        "at the next step and exits with status 75; the same command resumes "
        "mid-epoch; a second signal exits at once. Exit status: 0 done, 2 bad "
        "input, 3 non-finite loss, 75 stopped by a signal (resumable).",
    )
    defaults = _defaults()
    groups = {title: parser.add_argument_group(title) for title in FLAGS}
    for title, flags in FLAGS.items():
        _startup.add_flags(groups[title], flags, defaults)
    groups["output"].add_argument(
        "--output-dir", default=_Shown("runs/<dataset>"), help="the run folder"
    )
    groups["output"].add_argument(
        "--overwrite", action="store_true", help="replace a finished run there"
    )
    groups["output"].add_argument(
        "--backup-every-steps",
        type=int,
        metavar="N",
        help="also write the resume state (backup/) every N optimizer steps, "
        "besides every epoch (None: every epoch only)",
    )
    groups["output"].add_argument(
        "--backup-every-minutes",
        type=float,
        metavar="M",
        help="also write the resume state at the first step boundary once M "
        "minutes have passed since the last write (e.g. 10 on Colab or Kaggle)",
    )
    groups["data"].add_argument(
        "--cache-dir",
        default="auto",
        metavar="DIR",
        help="--dataset folder: decode the images once into a memory-mapped "
        "cache in DIR and read it on every later run; auto: <output-dir>/cache "
        "(kept after the run and by --overwrite); none: decode into memory",
    )
    _startup.add_import_flag(groups["diffusion and model"])
    # A test hook: makes the loss of this optimizer step NaN.
    parser.add_argument("--debug-nan-at-step", type=int, help=argparse.SUPPRESS)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    _startup.import_tensorflow()
    from keras_diffusion.callbacks import NonFiniteLossError
    from keras_diffusion.data import DatasetDownloadError
    from keras_diffusion.run import cli, training
    from keras_diffusion.run import config as train_config
    from keras_diffusion.run.preemption import EXIT_PREEMPTED, Preempted

    # The flags given; TrainConfig fills in the others.
    settings = {
        name: value
        for name, value in vars(args).items()
        if name not in RUN_FLAGS and not isinstance(value, (_Default, _Shown))
    }
    # The library's names for what these flags set.
    flags = cli.flag_names(
        parser,
        folder="--data-dir",
        cache="--cache-dir",
        path="--data-path",
        num_steps="--sampling-steps",
    )
    try:
        cli.import_modules(args.imports)
        config = train_config.TrainConfig(**settings)
        output_dir = args.output_dir
        if isinstance(output_dir, _Shown):
            output_dir = os.path.join("runs", config.dataset)
        result = training.train(
            config,
            output_dir,
            overwrite=args.overwrite,
            cache_dir=args.cache_dir,
            backup_every_steps=args.backup_every_steps,
            backup_every_minutes=args.backup_every_minutes,
            callbacks=[_nan_at_step(args.debug_nan_at_step)]
            if args.debug_nan_at_step
            else (),
        )
    except DatasetDownloadError as error:
        return cli.report_error(
            error, " (on the command line: --data-path FILE.npz)", flags=flags
        )
    except NonFiniteLossError as error:
        return cli.report_error(error, status=3)
    except Preempted as error:
        print(f"\n{error}", file=sys.stderr)
        return EXIT_PREEMPTED
    except (ValueError, TypeError, OSError) as error:
        if not cli.is_user_error(error):
            raise  # a library, Keras or TensorFlow error: its traceback matters
        return cli.report_error(error, flags=flags)
    print(f"Finished in {result.seconds:.0f}s. Outputs in {result.output_dir}:")
    print(f"  model:    {result.model_path}")
    print(f"  samples:  {result.samples_path}")
    print(f"  config:   {result.config_path}")
    print(f"  log:      {result.log_path}")
    if result.tensorboard_dir:
        print(f"  tensorboard: {result.tensorboard_dir}")
    if config.posthoc_ema:
        print(
            f"  post-hoc EMA snapshots: {result.output_dir}/posthoc_ema "
            f"(python scripts/posthoc_ema.py {result.output_dir} --sweep)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(_startup.run(main))
