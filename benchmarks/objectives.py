"""Training objectives side by side: quality per model call at equal steps.

Trains the same U-Net on the same data and seed with each objective (today's
recipe, v-prediction on the preset's schedule; EDM; flow matching), each for
the same number of epochs, one after the other, and prints each run's wall
time next to the others' (same U-Net and steps: equal time, which the print
shows). Then samples each model at 2, 4, 8, 16 and 32 model calls with every
sampler that fits the budget, and judges the samples:

- the digits preset: `DigitsQuality` (FD/floor and the confident share) on
  500 class-conditional samples;
- an image folder (`--data-dir`, with `--judge-folder` held out):
  `FolderQuality`'s FD/floor.

    python benchmarks/objectives.py --work-dir runs/objectives --epochs 25
    python benchmarks/objectives.py --work-dir runs/objectives-emoji \\
        --data-dir emoji/train --judge-folder emoji/heldout --epochs 20

Writes `<work-dir>/objectives.json` (every cell) and prints a Markdown table
of the best sampler of each objective at each budget.

    python benchmarks/objectives.py --work-dir DIR --step-times

times the training steps of each objective side by side instead (the same
config, `jit_compile` as the run resolves it, 10 rounds of 20 steps in
rotated order after a warm-up) and prints each one's median time a step over
today's recipe's: what "equal wall time" rests on.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.train_benchmark import rotated  # noqa: E402
from keras_diffusion import samplers  # noqa: E402
from keras_diffusion.evaluation import digits_quality, folder_quality  # noqa: E402
from keras_diffusion.run import TrainConfig, train  # noqa: E402
from keras_diffusion.run.build import build_data_and_model  # noqa: E402
from keras_diffusion.utils import files  # noqa: E402

# EDM with sigma_data the data's std in [-1, 1] (0.64 on the digits) and
# a log-sigma mean raised for short runs (docs/quality.md).
OBJECTIVES = {
    "vp": {},
    # Today's recipe with the other prediction types (the default sampler
    # of each, docs/quality.md).
    "vp-epsilon": {"prediction_type": "epsilon"},
    "vp-sample": {"prediction_type": "sample"},
    # A bare DiffusionModel's: epsilon on the linear schedule.
    "vp-epsilon-linear": {"prediction_type": "epsilon", "schedule": "linear"},
    "edm": {"schedule": "edm", "sigma_data": 0.64, "p_mean": -0.6},
    "flow": {"schedule": "flow"},
    "flow-shift3": {"schedule": "flow", "shift": 3.0},
    # The few-step process, its two ways to the target's derivative.
    "consistency": {"schedule": "consistency"},
    "consistency-continuous": {
        "schedule": "consistency",
        "consistency_training": "continuous",
    },
    # The network's time input s * 10 rather than s * 1000: the derivative
    # along the path then skips the fast waves of the time embedding.
    "consistency-continuous-t10": {
        "schedule": "consistency",
        "consistency_training": "continuous",
        "timesteps": 10,
    },
    "consistency-stages4": {"schedule": "consistency", "curriculum_stages": 4},
    # The mean-flow process at its defaults, and at MeanFlow's ImageNet
    # settings, the first row of docs/quality.md's "One call" table (its
    # other rows: one change each, as `--interval-share` and the flow flags).
    "meanflow": {"schedule": "meanflow"},
    "meanflow-imagenet": {
        "schedule": "meanflow",
        "interval_share": 0.25,
        "adaptive_power": 1.0,
        "logit_mean": 0.0,
        "logit_std": 1.0,
        "timesteps": 10,
    },
}
# Where a two-call consistency sampler starts its second call, besides the
# default (half the noise).
SECOND_LEVELS = (0.1, 0.2, 0.3, 0.7)
CALLS = tuple(int(c) for c in os.environ.get("OBJECTIVES_CALLS", "2 4 8 16 32").split())


def candidates(objective, calls):
    """`(label, sampler)` of every sampler that makes `calls` model calls
    (Heun: 2k - 1, so the largest k within the budget)."""
    if objective.startswith("meanflow"):
        return [(f"meanflow {calls}", samplers.MeanFlowSampler(calls))]
    if objective.startswith("consistency"):
        out = [(f"consistency {calls}", samplers.ConsistencySampler(calls))]
        if calls == 2:
            out += [
                (f"consistency 2 at {s}", samplers.ConsistencySampler(2, (1.0, s)))
                for s in SECOND_LEVELS
            ]
        return out
    out = [
        (f"dpm {calls}", samplers.DPMSolverSampler(calls)),
        (f"euler {calls}", samplers.EulerSampler(calls)),
    ]
    if objective.startswith("vp"):
        out.append((f"ddim {calls}", samplers.DDIMSampler(calls)))
        return out
    if calls >= 3:
        k = (calls + 1) // 2
        out.append((f"heun {k} ({2 * k - 1} calls)", samplers.HeunSampler(k)))
    return out


def _config(args, objective):
    kwargs = {"seed": 0, "epochs": args.epochs, **OBJECTIVES[objective]}
    if args.data_dir:
        kwargs.update(
            dataset="folder", data_dir=args.data_dir, image_size=args.image_size
        )
    return TrainConfig(**kwargs)


def _train(args, objective, log):
    folder = os.path.join(args.work_dir, objective)
    started = time.perf_counter()
    train(_config(args, objective), folder, overwrite=True, verbose=0, log=log)
    seconds = time.perf_counter() - started
    return files.load_model(os.path.join(folder, "model.keras")), seconds


def _judge(args, model):
    """A function of a sampler to the scores of the model's samples."""
    if not args.data_dir:
        quality = digits_quality.DigitsQuality(image_size=model.image_shape[0])

        def score(sampler):
            images, labels = digits_quality.sample_kind(
                model, "conditional", quality.num_samples, sampler=sampler, seed=123
            )
            s = quality.score(images, labels)
            return {"fd_ratio": s["fd_ratio"], "confident": s["confident"]}

        return score
    quality = folder_quality.FolderQuality(
        args.judge_folder, image_size=model.image_shape[0]
    )

    def score(sampler):
        s = folder_quality.judge_model(model, quality=quality, sampler=sampler)
        return {"fd_ratio": s["fd_ratio"]}

    return score


def step_times(args, rounds=10, steps=20):
    """Median seconds a training step of each objective, timed in turns."""
    fits = {}
    for objective in args.objectives:
        keras.utils.set_random_seed(0)
        dataset, model, _ = build_data_and_model(_config(args, objective).resolve())
        batches = dataset.repeat()
        model.fit(batches, epochs=1, steps_per_epoch=2 * steps, verbose=0)  # warm-up
        fits[objective] = (model, batches)
    times = {objective: [] for objective in fits}
    for trial in range(rounds):
        for objective in rotated(fits, trial):
            model, batches = fits[objective]
            started = time.perf_counter()
            model.fit(batches, epochs=1, steps_per_epoch=steps, verbose=0)
            times[objective].append((time.perf_counter() - started) / steps)
    medians = {k: float(np.median(v)) for k, v in times.items()}
    base = medians[args.objectives[0]]
    for objective, seconds in medians.items():
        spread = np.percentile(times[objective], [10, 90]) * 1000
        print(
            f"{objective}: {seconds * 1000:.1f} ms a step (10-90%: "
            f"{spread[0]:.1f}-{spread[1]:.1f}), {seconds / base:.3f}x "
            f"{args.objectives[0]}"
        )
    return medians


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--data-dir", help="an image folder (default: the digits)")
    parser.add_argument("--judge-folder", help="its held-out images")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument(
        "--objectives",
        nargs="+",
        choices=list(OBJECTIVES),
        default=[
            o
            for o in OBJECTIVES
            if not o.startswith(("vp-", "consistency", "meanflow"))
        ],
    )
    parser.add_argument(
        "--step-times", action="store_true", help="time the steps side by side"
    )
    args = parser.parse_args(argv)
    if bool(args.data_dir) != bool(args.judge_folder):
        parser.error("--data-dir and --judge-folder go together")
    os.makedirs(args.work_dir, exist_ok=True)
    if args.step_times:
        step_times(args)
        return
    results = {"epochs": args.epochs, "data": args.data_dir or "digits", "runs": {}}
    for objective in args.objectives:
        keras.utils.set_random_seed(0)
        model, seconds = _train(args, objective, log=lambda message: None)
        print(f"{objective}: trained in {seconds:.0f} s", flush=True)
        score = _judge(args, model)
        cells = {}
        for calls in CALLS:
            for label, sampler in candidates(objective, calls):
                cells[label] = {"calls": calls, **score(sampler)}
                print(f"  {label}: {cells[label]}", flush=True)
        results["runs"][objective] = {"seconds": seconds, "cells": cells}
        with open(os.path.join(args.work_dir, "objectives.json"), "w") as file:
            json.dump(results, file, indent=2)
    print(table(results))


def table(results):
    """Markdown: per objective and budget, the best sampler's cell."""
    lines = [
        "| objective | train s | " + " | ".join(f"{c} calls" for c in CALLS) + " |",
        "|---|---:|" + "---:|" * len(CALLS),
    ]
    for objective, run in results["runs"].items():
        row = [objective, f"{run['seconds']:.0f}"]
        for calls in CALLS:
            cells = {k: v for k, v in run["cells"].items() if v["calls"] == calls}
            label, best = min(cells.items(), key=lambda kv: kv[1]["fd_ratio"])
            text = f"{best['fd_ratio']:.2f}"
            if "confident" in best:
                text += f", {best['confident']:.2f}"
            row.append(f"{text} ({label.split(' ')[0]})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
