"""Training and sampling throughput: the hand-written loop vs `fit` vs the limit.

What `scripts/benchmark.py` runs (its `--help` describes the variants); it
lives at the root of the checkout and is not installed with the package:
the hand-written loop with host-side noising (a), `DiffusionModel.fit` in
four settings (b-e) and the compute-only limit (f), all on the same
denoiser, data, optimizer and EMA; `generate` against Python sampling
loops; and the same U-Net trained and sampled with PyTorch + diffusers.

- `config.py`: `BenchmarkConfig`, the variants and the benchmarked models;
- `loops.py`: one runner a variant, each timing `run(steps)`;
- `train_benchmark.py`: interleaved trials, peak memory and the result table;
- `sampling.py`: `generate` against Python loops of denoiser calls;
- `device.py`: `select_device`, which a process calls before TensorFlow runs;
- `run.py`: the environment and `run_benchmarks`;
- `peer.py`: the PyTorch + diffusers side (torch and diffusers only);
- `peer_jobs.py`: one trial of one side, in a process of its own;
- `peer_compare.py`: the alternated processes and the Keras / torch table;
- `components.py`: the U-Net's convolutions and GroupNorms timed alone in
  each framework;
- `distribution.py`: per-epoch step times in fresh processes (is the machine
  bimodal?), and `distribution_report.py` their table, histograms and plot;
- `workers.py`: runs a worker process and reads its result.

Names are imported on first use: importing the package imports no framework,
so a worker process of the peer comparison loads only its own.
"""

import importlib

_HOMES = {
    "benchmarks.components": ("format_components", "run_components"),
    "benchmarks.config": (
        "CPU_RUNS",
        "EMA_DECAY",
        "GPU_RUNS",
        "MODELS",
        "TINY_UNET",
        "VARIANTS",
        "BenchmarkConfig",
        "build_unet",
        "load_images",
    ),
    "benchmarks.device": ("select_device",),
    "benchmarks.distribution": ("run_distribution",),
    "benchmarks.distribution_report": (
        "DISTRIBUTION_CASES",
        "UNET_CASES",
        "format_distribution",
        "plot_distribution",
    ),
    "benchmarks.loops": (
        "ComputeOnly",
        "FitLoop",
        "NaiveLoop",
        "build_variants",
        "host_noising",
        "make_train_step",
    ),
    "benchmarks.peer_compare": ("format_peer_table", "missing_peer", "run_peer"),
    "benchmarks.run": ("diagnose_preset", "environment", "run_benchmarks"),
    "benchmarks.sampling": ("benchmark_sampling", "ddim_python_loop"),
    "benchmarks.train_benchmark": (
        "PeakMemory",
        "benchmark_training",
        "format_table",
        "median_ratio",
    ),
}
_EXPORTS = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'benchmarks' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
