"""Training and sampling throughput: the hand-written loop vs `fit` vs the limit.

What `scripts/benchmark.py` runs (its `--help` describes the variants); it
lives at the root of the checkout and is not installed with the package:
the hand-written loop with host-side noising (a), `DiffusionModel.fit` in
four settings (b-e) and the compute-only limit (f), all on the same
denoiser, data, optimizer and EMA; and `generate` against Python sampling
loops.

- `config.py`: `BenchmarkConfig`, the variants and the benchmarked models;
- `loops.py`: one runner a variant, each timing `run(steps)`;
- `train_benchmark.py`: interleaved trials, peak memory and the result table;
- `sampling.py`: `generate` against Python loops of denoiser calls;
- `run.py`: device choice, the environment and `run_benchmarks`.
"""

from benchmarks.config import (
    CPU_RUNS,
    GPU_RUNS,
    MODELS,
    TINY_UNET,
    VARIANTS,
    BenchmarkConfig,
    build_unet,
    load_images,
)
from benchmarks.loops import (
    ComputeOnly,
    FitLoop,
    NaiveLoop,
    build_variants,
    host_noising,
    make_train_step,
)
from benchmarks.run import (
    diagnose_preset,
    environment,
    run_benchmarks,
    select_device,
)
from benchmarks.sampling import benchmark_sampling, ddim_python_loop
from benchmarks.train_benchmark import (
    PeakMemory,
    benchmark_training,
    format_table,
    median_ratio,
)

__all__ = [
    "CPU_RUNS",
    "GPU_RUNS",
    "MODELS",
    "TINY_UNET",
    "VARIANTS",
    "BenchmarkConfig",
    "ComputeOnly",
    "FitLoop",
    "NaiveLoop",
    "PeakMemory",
    "benchmark_sampling",
    "benchmark_training",
    "build_unet",
    "build_variants",
    "ddim_python_loop",
    "diagnose_preset",
    "environment",
    "format_table",
    "host_noising",
    "load_images",
    "make_train_step",
    "median_ratio",
    "run_benchmarks",
    "select_device",
]
