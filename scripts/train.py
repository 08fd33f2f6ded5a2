"""Train a diffusion model; with no arguments, on the embedded digits.

    python scripts/train.py                       # digits, 16x16, a few minutes
    python scripts/train.py --process edm         # digits, EDM training, Heun grid
    python scripts/train.py --process flow        # digits, flow matching
    python scripts/train.py --beta-schedule linear --prediction-type epsilon
    python scripts/train.py --dataset folder --data-dir my_images/ --image-size 64
    python scripts/train.py --dataset folder --data-dir my_images/ --image-size 256 \
        --latent sd-vae --autoencoder-weights vae_encoder.h5,kcv_decoder.h5
    python scripts/train.py --init-from keras-hub:stable_diffusion_3_medium \
        --data-dir my_captioned_images/ --image-size 512 --lora-rank 16

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
import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

# Nothing here imports TensorFlow before the flags are parsed: a mistyped
# flag is answered at once, without TensorFlow's start-up lines.
import _startup  # noqa: E402

_startup.quiet_environment()

# The flags that are `train()`'s arguments or the script's own, not
# `TrainConfig` settings.
SCRIPT_FLAGS = ("imports", "debug_nan_at_step", "write_flag_table")


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


class _NotGiven:
    """The default of a flag: not given, so the setting's own, the dataset
    preset's or the process's; shown in --help in words
    (`keras_diffusion.run.flags.shown_default`)."""

    def __init__(self, setting):
        self.setting = setting

    def __str__(self):
        from keras_diffusion.run import flags

        return flags.shown_default(self.setting)


def build_parser():
    """The parser of every flag, made from the settings' declarations: the
    run's own and each registered process's (TensorFlow and the `--import`
    modules imported first)."""
    from keras_diffusion.run import flags

    parser = _startup.new_parser(
        __doc__,
        epilog="Flags defaulting to the dataset's preset take the values of "
        "keras_diffusion.data.PRESETS; docs/flags.md lists every flag. "
        "SIGTERM or SIGINT writes the resume state at the next step and exits "
        "with status 75; the same command resumes mid-epoch; a second signal "
        "exits at once. Exit status: 0 done, 2 bad input, 3 non-finite loss, "
        "75 stopped by a signal (resumable).",
    )
    groups = flags.add_flags(parser, _NotGiven)
    _startup.add_import_flag(groups["process"])
    # A test hook: makes the loss of this optimizer step NaN.
    parser.add_argument("--debug-nan-at-step", type=int, help=argparse.SUPPRESS)
    # Writes docs/flags.md (flags.WRITE_TABLE) and exits.
    parser.add_argument("--write-flag-table", metavar="FILE", help=argparse.SUPPRESS)
    return parser


def _parse(argv):
    """The parsed flags: the `--import` modules first (their processes'
    flags are made from their declarations), then every flag."""
    imports = _startup.imports_of(argv)
    _startup.import_tensorflow()
    from keras_diffusion.run import cli

    try:
        cli.import_modules(imports)
    except ValueError as error:
        print(f"{os.path.basename(__file__)}: error: {error}", file=sys.stderr)
        sys.exit(2)
    parser = build_parser()
    return parser, parser.parse_args(argv)


def main(argv=None):
    parser, args = _parse(sys.argv[1:] if argv is None else list(argv))
    from keras_diffusion.callbacks import NonFiniteLossError
    from keras_diffusion.data import DatasetDownloadError
    from keras_diffusion.run import cli, training
    from keras_diffusion.run import config as train_config
    from keras_diffusion.run import flags as run_flags
    from keras_diffusion.run.preemption import EXIT_PREEMPTED, Preempted
    from keras_diffusion.run.run_settings import TRAIN_ARGUMENTS

    if args.write_flag_table:
        with open(args.write_flag_table, "w") as f:
            f.write(run_flags.flag_table())
        return 0
    given = {
        name: value
        for name, value in vars(args).items()
        if name not in SCRIPT_FLAGS and not isinstance(value, _NotGiven)
    }
    if "data_dir" in given and "dataset" not in given:
        given["dataset"] = "folder"  # an image folder is the folder dataset
    # `train()`'s arguments; TrainConfig takes the settings given and fills
    # in the others.
    arguments = {s.name: given.pop(s.name, s.default) for s in TRAIN_ARGUMENTS}
    # The library's names for what these flags set.
    flags = cli.flag_names(
        parser,
        folder="--data-dir",
        cache="--cache-dir",
        path="--data-path",
        num_steps="--sampling-steps",
    )
    try:
        config = train_config.TrainConfig(**given)
        if arguments["output_dir"] is None:
            arguments["output_dir"] = os.path.join("runs", config.dataset)
        result = training.train(
            config,
            **arguments,
            callbacks=[_nan_at_step(args.debug_nan_at_step)]
            if args.debug_nan_at_step
            else (),
        )
    except DatasetDownloadError as error:
        return cli.report_error(
            error, " (on the command line: --data-path FILE.npz or FOLDER)", flags=flags
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
