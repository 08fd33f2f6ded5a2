"""Keras against PyTorch + diffusers on the same U-Net, in alternated processes.

Each trial runs every side once, each in a fresh process
(`benchmarks.peer_jobs`), one after the other, so the frameworks never
share threads or memory and each uses all the cores; the order of the sides
rotates each trial. A Keras side's ratio is the median over trials of its
images/s over the torch side's of the same trial (`torch-amp`'s for the
mixed-precision side), with the spread of those per-trial ratios.
"""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import tempfile

import numpy as np

from benchmarks.config import CPU_RUNS, EMA_DECAY, GPU_RUNS, build_unet, load_images
from benchmarks.peer_jobs import SIDES
from benchmarks.train_benchmark import rotated
from benchmarks.workers import ROOT, run_worker

PEER_PACKAGES = ("torch", "diffusers")
REFERENCE = {
    "keras": "torch",
    "keras-xla": "torch",
    "keras-graph": "torch",
    "keras-mixed": "torch-amp",
}
JOB_KINDS = ("training", "sampling")


def missing_peer():
    """The first of torch and diffusers that is not installed, or `None`."""
    for name in PEER_PACKAGES:
        if importlib.util.find_spec(name) is None:
            return name
    return None


def peer_environment():
    """torch's and diffusers' versions, and the checkout the Keras side ran.

    `keras_diffusion_changes`: its files that differ from the commit, since
    the workers import the working tree.
    """
    env = {name: importlib.metadata.version(name) for name in PEER_PACKAGES}

    def git(*args):
        command = ["git", "-C", ROOT, *args]
        done = subprocess.run(command, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    env["commit"] = git("rev-parse", "--short", "HEAD")
    changes = git("status", "--porcelain", "--", "keras_diffusion")
    env["keras_diffusion_changes"] = changes.splitlines() if changes else []
    return env


def make_job(name, config, gpu, folder):
    """The job of the model `name` (a dict) and its images, saved in `folder`."""
    unet, schedule = build_unet(name)
    size = unet.image_shape[0]
    images_path = os.path.join(folder, f"{name}_images.npy")
    np.save(images_path, load_images(size))
    batch_size, steps, trials = (GPU_RUNS if gpu else CPU_RUNS)[name]
    quick = config.quick
    return {
        "model": name,
        "unet": unet.get_config(),
        "parameters": int(unet.count_params()),
        "schedule": schedule.get_config(),
        "images": images_path,
        "batch_size": config.batch_size or batch_size,
        "steps": config.steps or (2 if quick else steps),
        "trials": config.trials or (1 if quick else trials),
        "learning_rate": config.learning_rate,
        "ema": config.ema,
        "ema_decay": EMA_DECAY,
        "training": config.training,
        "sampling": config.sampling,
        "sampling_images": config.sampling_images,
        "sampling_steps": 5 if quick else config.sampling_steps,
        "gpu": gpu,
        # What `DiffusionModel.compile` resolves an unset `jit_compile` to.
        # Intra- and inter-op threads of both sides.
        "threads": config.peer_threads or os.cpu_count(),
    }


def run_side(job_path, side):
    """Runs `side`'s worker process on the job; returns its result dict."""
    return run_worker("benchmarks.peer_jobs", job_path, side)


def spread(values):
    """`{"median", "min", "max"}` of `values`."""
    values = np.asarray(values, dtype=float)
    return {
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def summarize(job, runs):
    """Per side and job kind: images/s, ratio to the reference, peak memory."""
    sides = {}
    for side, results in runs.items():
        sides[side] = {
            "description": SIDES[side],
            "settings": results[0]["settings"],
            "load": [r["load"] for r in results],
        }
        for kind in (k for k in JOB_KINDS if job[k]):
            rates = [r[kind]["images_per_sec"] for r in results]
            entry = {
                "images_per_sec": spread(rates),
                "per_trial": rates,
                "first_call_s": spread([r[kind]["first_call_s"] for r in results]),
                "peak_rss_mib": max(r[kind]["peak_rss_mib"] for r in results),
                "peak_device_mib": max(r[kind]["peak_device_mib"] for r in results),
            }
            reference = runs.get(REFERENCE.get(side))
            if reference:
                pairs = zip(rates, reference, strict=True)
                entry["ratio"] = spread(
                    [a / r[kind]["images_per_sec"] for a, r in pairs]
                )
            sides[side][kind] = entry
    return sides


def peer_sides(config):
    """The sides of a trial: the Keras defaults (XLA or not, measured in the
    worker: `jit_choice`), each `jit_compile` forced, and torch.

    `--quick` runs the defaults and torch alone: the default side compiles
    both forms already, and each forced side is the same worker with one
    setting (a process, a TensorFlow start-up and compiles each).
    """
    sides = ["keras", "torch"]
    if not config.quick:
        sides[1:1] = ["keras-xla", "keras-graph"]
    if config.peer_mixed:
        sides += ["keras-mixed", "torch-amp"]
    return sides


def benchmark_peer(name, config, gpu, log):
    """Alternated trials of every side on the model `name`; returns a dict.

    The Keras sides: `compile` with its defaults (which measure XLA against
    graph mode, as for a long run), and with each `jit_compile` forced
    except under `--quick` (`peer_sides`).
    """
    with tempfile.TemporaryDirectory() as folder:
        job = make_job(name, config, gpu, folder)
        sides = peer_sides(config)
        job_path = os.path.join(folder, f"{name}_job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        log(
            f"\n== peer: {name} U-Net ({job['parameters'] / 1e6:.3f} M parameters), "
            f"batch {job['batch_size']}, {job['steps']} steps x {job['trials']} "
            "trials, one process a side a trial"
        )
        runs = {side: [] for side in sides}
        for trial in range(job["trials"]):
            for side in rotated(sides, trial):
                runs[side].append(run_side(job_path, side))
            log(
                f"  trial {trial + 1}/{job['trials']}: "
                + ", ".join(f"{side} {_rates(runs[side][-1])}" for side in sides)
            )
    keys = ("parameters", "batch_size", "steps", "trials", "threads")
    keys += ("sampling_images", "sampling_steps")
    loads = [x for results in runs.values() for r in results for x in r["load"]]
    return {
        **{k: job[k] for k in keys},
        "jobs": [kind for kind in JOB_KINDS if job[kind]],
        "load": spread(loads),
        "sides": summarize(job, runs),
    }


def _rates(result):
    return "/".join(
        f"{result[k]['images_per_sec']:.1f}" for k in JOB_KINDS if k in result
    )


def format_peer_table(name, result):
    """The table of a `benchmark_peer` result: a row a side and job kind."""
    parts = []
    if "training" in result["jobs"]:
        parts.append(f"training batch {result['batch_size']}, {result['steps']} steps")
    if "sampling" in result["jobs"]:
        parts.append(
            f"sampling {result['sampling_images']} images, DDIM "
            f"{result['sampling_steps']}"
        )
    parts += [f"{result['threads']} threads a side", f"{result['trials']} trials"]
    lines = [
        f"\n{name}: " + "; ".join(parts) + " (median, min-max)",
        f"  1-minute load average in the workers (their own included): "
        f"{_spread(result['load'], '.1f')}",
        f"  {'side':12s} {'job':9s} {'images/s':>22s} {'keras/torch':>20s} "
        f"{'peak RSS MiB':>13s}",
    ]
    for side, entry in result["sides"].items():
        for kind in JOB_KINDS:
            if kind not in entry:
                continue
            v = entry[kind]
            ratio = v.get("ratio")
            lines.append(
                f"  {side:12s} {kind:9s} {_spread(v['images_per_sec']):>22s} "
                f"{_spread(ratio, '.2f') if ratio else '':>20s} "
                f"{v['peak_rss_mib']:13.0f}"
            )
    for side, entry in result["sides"].items():
        settings = ", ".join(f"{k}={v}" for k, v in entry["settings"].items())
        lines.append(f"  {side}: {entry['description']} ({settings})")
    return "\n".join(lines)


def _spread(s, fmt=None):
    def number(x):  # three significant digits, never an exponent
        return format(x, fmt or (".0f" if x >= 100 else ".3g"))

    return f"{number(s['median'])} ({number(s['min'])}-{number(s['max'])})"


def run_peer(config, gpu, log):
    """`benchmark_peer` on each of `config.models`; a dict by model name.

    Call it in a process that keeps off the GPU (`run_benchmarks` does): it
    only builds each Keras U-Net, to count its parameters, and saves the data.
    """
    results = {}
    for name in config.models:
        results[name] = benchmark_peer(name, config, gpu, log)
        log(format_peer_table(name, results[name]))
    return results
