"""Training and sampling throughput: the hand-written loop vs `fit` vs the limit.

    python scripts/benchmark.py                       # small + mnist U-Nets, CPU
    python scripts/benchmark.py --models small --json bench.json
    python scripts/benchmark.py --device gpu --models mnist --batch-size 128
    python scripts/benchmark.py --quick               # seconds, for tests
    python scripts/benchmark.py --diagnose digits     # why is my training slow?
    python scripts/benchmark.py --peer --models small # against PyTorch + diffusers
    python scripts/benchmark.py --components          # convolutions, GroupNorms
    python scripts/benchmark.py --distribution all    # per-epoch times: bimodal?

Training variants, all on the same denoiser, data, optimizer (Adam) and EMA:

  a  naive: per batch, NumPy timesteps, noise and noising on the host, then a
     `@tf.function` step (what users write by hand)
  b  `DiffusionModel.fit` (on-device noising) with compile's defaults (XLA
     on, steps_per_execution "auto": 8 steps a compiled call)
  c  b with the --steps-per-execution given (default 1: a call a step)
  d  b with jit_compile=False (TensorFlow graph mode, Keras' CPU default)
  e  b with mixed precision (mixed_float16) and XLA (GPU only)
  f  compute-only limit: the same forward + backward + Adam + EMA on batches
     already on the device, looped inside one compiled function

Trials are interleaved in one process (the order rotates each trial) and every
ratio is the median over trials of the per-trial ratio, which cancels most of
the drift of a shared machine. Peak memory is the largest resident set size
(CPU) or allocator peak (GPU) seen while a variant ran; on the CPU it includes
what the variants run before it still hold.

--peer (needs `pip install ".[peer]"`): the same U-Net, data, schedule, Adam
and EMA trained and sampled (DDIM 50) with PyTorch + diffusers, against
`DiffusionModel.fit` compiled with its defaults and with the jit_compile
they do not choose (XLA or graph mode).
Each side of each trial is a process of its own, the sides alternated, each
using every core (--peer-threads to choose); the table gives images/s, the
keras/torch ratio (median of per-trial ratios) and each process's peak
resident memory. On a loaded machine torch's OpenMP threads lose far more
than TensorFlow's pool: read the load the table reports.

--components: the digits U-Net's 3x3 convolutions and GroupNorm + SiLU
blocks, forward + backward at batch 64, timed alone with XLA, in graph mode
(oneDNN on a CPU) and in torch when installed, a process a side: which
kernels make one framework's step faster than the other's.
"""

import argparse
import dataclasses
import json
import os
import sys

# Run from a checkout, use its package rather than an installed copy.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _startup

import _startup  # noqa: E402

_startup.quiet_environment()

# The harness lives in benchmarks/ at the root of the checkout (it is not
# installed). Importing it starts no TensorFlow device: --device cpu still works.
import benchmarks  # noqa: E402

# The defaults come from the harness, which imports Keras: quietly.
_startup.import_tensorflow()
DEFAULTS = benchmarks.BenchmarkConfig()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        default=",".join(DEFAULTS.models),
        help="comma-separated: small (digits U-Net, 16x16), mnist (the mnist "
        "preset U-Net, 32x32), tiny (8x8, for tests). Default: %(default)s",
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULTS.variants),
        help="comma-separated letters a-f (see above); e runs on a GPU only. "
        "Default: %(default)s",
    )
    parser.add_argument("--batch-size", type=int, help="override the batch size")
    parser.add_argument("--steps", type=int, help="override timed steps a trial")
    parser.add_argument("--trials", type=int, help="override the number of trials")
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=DEFAULTS.steps_per_execution,
        help="for variant c and --diagnose. Default: %(default)s",
    )
    parser.add_argument("--learning-rate", type=float, default=DEFAULTS.learning_rate)
    parser.add_argument(
        "--no-ema", action="store_true", help="train every variant without EMA"
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="cpu hides GPUs; gpu fails without one. Default: %(default)s",
    )
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny model, few steps and trials: checks that everything runs "
        "(with --peer, the compile defaults' side and torch's alone)",
    )
    parser.add_argument(
        "--no-sampling", action="store_true", help="skip the sampling benchmark"
    )
    parser.add_argument(
        "--sampling-images",
        type=int,
        default=DEFAULTS.sampling_images,
        help="images a sampling call. Default: %(default)s",
    )
    parser.add_argument(
        "--no-training", action="store_true", help="skip the training benchmark"
    )
    parser.add_argument(
        "--diagnose",
        metavar="PRESET",
        help="instead of benchmarking, run keras_diffusion.diagnostics on the "
        "preset's U-Net and data set (digits, mnist, fashion_mnist, cifar10)",
    )
    parser.add_argument(
        "--data-path", help="local .npz for --diagnose with a keras data set"
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile with jit_compile=True for --diagnose",
    )
    parser.add_argument(
        "--peer",
        action="store_true",
        help="compare with PyTorch + diffusers on the same U-Net (--trials "
        'alternated pairs of processes); needs pip install ".[peer]"',
    )
    parser.add_argument(
        "--peer-mixed",
        action="store_true",
        help="with --peer, also mixed precision: Keras mixed_float16 + XLA "
        "against torch.autocast float16 (bfloat16 for both on a CPU)",
    )
    parser.add_argument(
        "--components",
        action="store_true",
        help="instead, time the digits U-Net's 3x3 convolutions and GroupNorm "
        "+ SiLU alone on the CPU (forward + backward, batch 64) with XLA, in "
        "graph mode and, when installed, in torch: where a step's time goes",
    )
    parser.add_argument(
        "--peer-threads",
        type=int,
        help="with --peer or --components, the threads of both sides "
        "(TensorFlow's intra- and inter-op pools, torch.set_num_threads and "
        "set_num_interop_threads). "
        "Default: every core",
    )
    parser.add_argument(
        "--distribution",
        metavar="CASES",
        help="instead, per-epoch step times in fresh processes, with their "
        "histogram, flagging a bimodal machine: comma-separated cases of "
        f"{', '.join(benchmarks.DISTRIBUTION_CASES)}, or 'all' (torch needs "
        "the peer extra)",
    )
    parser.add_argument(
        "--distribution-model",
        default="conv",
        help="with --distribution: conv (a plain 4-layer conv denoiser, 32x32, "
        "batch 32) or a --models U-Net (fit, fit-autotune and torch only). "
        "Default: %(default)s",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=20,
        help="with --distribution, epochs a "
        "process after the first (dropped). Default: %(default)s",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=3,
        help="with --distribution, fresh processes a case. Default: %(default)s",
    )
    parser.add_argument(
        "--plot", metavar="PNG", help="with --distribution, write the histograms"
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    for model in args.models:
        if model not in benchmarks.MODELS:
            choices = ", ".join(benchmarks.MODELS)
            parser.error(f"unknown model {model!r}; choose from {choices}")
    for variant in args.variants:
        if variant not in benchmarks.VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from a-f")
    if args.distribution:
        cases = args.distribution.split(",")
        args.distribution = (
            list(benchmarks.DISTRIBUTION_CASES) if cases == ["all"] else cases
        )
        for case in args.distribution:
            if case not in benchmarks.DISTRIBUTION_CASES:
                choices = ", ".join(benchmarks.DISTRIBUTION_CASES)
                parser.error(f"unknown case {case!r}; choose from {choices}")
        model = args.distribution_model
        if model != "conv" and model not in benchmarks.MODELS:
            parser.error(f"unknown --distribution-model {model!r}")
        wrong = [c for c in args.distribution if c not in benchmarks.UNET_CASES]
        if model != "conv" and wrong:
            parser.error(
                f"on a U-Net only {', '.join(benchmarks.UNET_CASES)} run; "
                f"received {', '.join(wrong)}"
            )
    for flag in ("peer_threads", "sampling_images", "epochs", "processes"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.quick:
        args.models = ["tiny"]
    return args


def distribution(args):
    """`--distribution`: the per-epoch table and histograms (and `--plot`)."""
    log = lambda text: print(text, flush=True)  # noqa: E731
    log(
        f"{len(args.distribution)} case(s) on {args.distribution_model}: "
        f"{args.processes} processes x {args.epochs} epochs each, alternated"
    )
    results = benchmarks.run_distribution(
        args.distribution, args.distribution_model, args.epochs, args.processes, log
    )
    log(benchmarks.format_distribution(results))
    if args.plot:
        benchmarks.plot_distribution(results, args.plot)
        log(f"Histograms: {args.plot}")
    output = {"distribution": results, "environment": benchmarks.environment()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(output, f, indent=2, default=str)
    return output


def main(argv=None):
    args = parse_args(argv)
    if args.distribution:
        return distribution(args)
    missing = args.peer and benchmarks.missing_peer()
    if missing:
        raise SystemExit(
            f'--peer needs {missing}: pip install ".[peer]" (torch and diffusers)'
        )
    gpu = benchmarks.select_device(args.device)
    if args.device == "gpu" and not gpu:
        raise SystemExit("--device gpu: TensorFlow sees no GPU.")
    config = dataclasses.replace(
        DEFAULTS,
        models=tuple(args.models),
        variants=tuple(args.variants),
        batch_size=args.batch_size,
        steps=args.steps,
        trials=args.trials,
        steps_per_execution=args.steps_per_execution,
        learning_rate=args.learning_rate,
        ema=not args.no_ema,
        quick=args.quick,
        training=not args.no_training,
        sampling=not args.no_sampling,
        sampling_images=args.sampling_images,
        diagnose=args.diagnose,
        data_path=args.data_path,
        jit_compile=args.jit_compile,
        peer=args.peer,
        peer_mixed=args.peer_mixed,
        peer_threads=args.peer_threads,
        components=args.components,
    )
    output = benchmarks.run_benchmarks(
        config, gpu, log=lambda text: print(text, flush=True)
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(output, f, indent=2, default=str)
    return output


if __name__ == "__main__":
    # `main` returns its results (for the tests); the exit status is 0.
    sys.exit(_startup.run(lambda: main() and 0))
