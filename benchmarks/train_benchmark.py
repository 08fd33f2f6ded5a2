"""The training benchmark: interleaved trials of each variant, and its table.

Trials are interleaved in one process (the order rotates each trial) and every
ratio is the median over trials of the per-trial ratio, which cancels most of
the drift of a shared machine. Peak memory is the largest resident set size
(CPU) or allocator peak (GPU) seen while a variant ran; on the CPU it includes
what the variants run before it still hold.
"""

import os
import threading

import numpy as np
import tensorflow as tf

from benchmarks.config import (
    CPU_RUNS,
    GPU_RUNS,
    VARIANTS,
    image_size,
    load_images,
)
from benchmarks.loops import build_variants


class PeakMemory:
    """Largest RSS (CPU, sampled every 5 ms) or allocator peak (GPU) in a block."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.peak = 0
        self._stop = None

    @staticmethod
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")
            return self
        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, self.rss())
                self._stop.wait(0.005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.gpu:
            info = tf.config.experimental.get_memory_info("GPU:0")
            self.peak = max(self.peak, info["peak"])
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())


def median_ratio(numerators, denominators):
    return float(np.median(np.asarray(numerators) / np.asarray(denominators)))


def rotated(keys, trial):
    """`keys` in a list rotated by `trial`: each trial starts elsewhere."""
    keys = list(keys)
    return keys[trial % len(keys) :] + keys[: trial % len(keys)]


def benchmark_training(name, config, gpu, log):
    """Times each variant of `config` on the model `name`; returns a dict.

    Args:
        name: a name of `MODELS`.
        config: a `BenchmarkConfig`.
        gpu: bool, whether a GPU is used (variant e runs only then).
        log: callable taking one message string.
    """
    batch_size, steps, trials = (GPU_RUNS if gpu else CPU_RUNS)[name]
    batch_size = config.batch_size or batch_size
    steps = config.steps or steps
    trials = config.trials or trials
    spe = config.steps_per_execution
    steps = max(spe, steps - steps % spe) if "c" in config.variants else steps
    variants = [v for v in config.variants if v != "e" or gpu]
    images = load_images(image_size(name))
    log(f"\n== {name} U-Net, {images.shape[1]}x{images.shape[2]}, batch {batch_size}")
    built, parameters = build_variants(
        name,
        variants,
        batch_size,
        spe,
        config.learning_rate,
        config.ema,
        gpu,
        images,
    )
    memory, warmup_s = {}, {}
    for key, runner in built.items():
        with PeakMemory(gpu) as peak:
            warmup_s[key] = runner.run(spe if key == "c" else 1)
            if not config.quick:
                runner.run(spe if key == "c" else 1)
        memory[key] = peak.peak
        log(f"  warm-up {key} ({VARIANTS[key]}): {warmup_s[key]:.1f} s")
    rates = {key: [] for key in built}
    for trial in range(trials):
        for key in rotated(built, trial):
            with PeakMemory(gpu) as peak:
                rates[key].append(steps / built[key].run(steps))
            memory[key] = max(memory[key], peak.peak)
        log(
            f"  trial {trial + 1}/{trials}: "
            + ", ".join(f"{k} {rates[k][-1]:.2f}" for k in built)
            + " steps/s"
        )
    results = {}
    for key in built:
        entry = {
            "variant": VARIANTS[key],
            "steps_per_sec": float(np.median(rates[key])),
            "images_per_sec": float(np.median(rates[key])) * batch_size,
            "first_call_s": warmup_s[key],
            "peak_memory_mib": memory[key] / 2**20,
        }
        if "a" in rates:
            entry["ratio_to_naive"] = median_ratio(rates[key], rates["a"])
        if "f" in rates:
            entry["ratio_to_compute"] = median_ratio(rates[key], rates["f"])
        results[key] = entry
    return {
        "batch_size": batch_size,
        "steps_per_trial": steps,
        "trials": trials,
        "steps_per_execution": spe,
        "ema": config.ema,
        "parameters": int(parameters),
        "variants": results,
    }


def format_table(name, result):
    """The table of a `benchmark_training` result, one row a variant."""
    lines = [
        f"\n{name}: batch {result['batch_size']}, {result['steps_per_trial']} "
        f"steps x {result['trials']} trials (medians)",
        f"  {'variant':34s} {'steps/s':>8s} {'images/s':>9s} {'vs (a)':>7s} "
        f"{'vs (f)':>7s} {'peak MiB':>9s} {'1st call s':>10s}",
    ]
    for key, v in result["variants"].items():
        lines.append(
            f"  ({key}) {v['variant']:30s} {v['steps_per_sec']:8.3f} "
            f"{v['images_per_sec']:9.1f} {v.get('ratio_to_naive', float('nan')):7.2f} "
            f"{v.get('ratio_to_compute', float('nan')):7.2f} "
            f"{v['peak_memory_mib']:9.0f} {v['first_call_s']:10.1f}"
        )
    return "\n".join(lines)
