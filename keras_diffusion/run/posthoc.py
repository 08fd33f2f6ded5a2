"""Post-hoc EMA of a run folder: the model of any EMA length, chosen after
training from the snapshots a `--posthoc-ema` run wrote
(`keras_diffusion.averages.posthoc`), and the sweep that judges a range
of lengths (`scripts/posthoc_ema.py`).

    model = keras_diffusion.posthoc_ema("runs/digits", sigma_rel=0.08)
    model.generate(16, seed=0)
"""

import csv
import dataclasses
import os
import warnings

from keras_diffusion.averages import posthoc as reconstruction
from keras_diffusion.averages.power_ema import check_sigma_rels
from keras_diffusion.evaluation import posthoc_sweep
from keras_diffusion.utils import files, plot, run_files

__all__ = [
    "LARGE_ERROR",
    "SweepResult",
    "posthoc_ema",
    "sweep",
    "write",
]

CSV_FILE = "posthoc_ema.csv"
PLOT_FILE = "posthoc_ema.png"
MODEL_FILE = "posthoc_ema.keras"

# The reconstruction's error (the relative L2 distance between the weights
# it gives the run's updates and the wanted profile's) above which
# `posthoc_ema` warns. On 16 snapshots of the two default profiles it is
# below 0.05 from sigma_rel 0.025-0.028 to 0.233 (at most 0.024 from 0.036
# to 0.2) and 0.08-0.35 at 0.25, 0.02 and 0.01, the widths whose scores
# fell away in the sweeps (docs/quality.md, "Post-hoc EMA").
LARGE_ERROR = 0.05


def _snapshots_of(run_folder):
    """`(model_path, snapshot_folder)` of the run folder `run_folder`, each
    checked, with errors that name the path given."""
    if not isinstance(run_folder, (str, os.PathLike)):
        raise TypeError(
            "Argument `run_folder` must be the path of a run folder of "
            f"scripts/train.py. Received: run_folder={run_folder!r}"
        )
    path = os.fspath(run_folder)
    if os.path.isfile(path):
        raise ValueError(
            f"{path!r} is a file; post-hoc EMA needs the run folder that holds "
            f"it (its {run_files.POSTHOC_DIR}/ snapshots): "
            f"{os.path.dirname(os.path.abspath(path))!r}"
        )
    if not os.path.isdir(path):
        raise ValueError(f"No run folder {path!r}: no such folder.")
    snapshots = os.path.join(path, run_files.POSTHOC_DIR)
    if not reconstruction.snapshot_steps(snapshots):
        raise ValueError(
            f"The run folder {path!r} holds no post-hoc EMA snapshots "
            f"({run_files.POSTHOC_DIR}/): train it with --posthoc-ema."
        )
    model_path = os.path.join(path, run_files.MODEL_FILE)
    if not os.path.isfile(model_path):
        raise ValueError(
            f"The run folder {path!r} has no {run_files.MODEL_FILE} yet (it is "
            "written every --checkpoint-every epochs and at the end)."
        )
    return model_path, snapshots


def posthoc_ema(run_folder, sigma_rel, at=None):
    """The model of a `--posthoc-ema` run with the EMA of width `sigma_rel`.

    Args:
        run_folder: str, the run folder.
        sigma_rel: float in (0, 0.28): the EMA's length relative to the
            run's (EDM2's sigma_rel; the run tracked 0.05 and 0.1).
        at: optional int, the optimizer update to take it at; `None` for
            the newest snapshot's (the run's end).

    Returns:
        A `DiffusionModel` that samples with that EMA and saves as any other
        (it tracks no profiles). A `UserWarning` says when the snapshots
        reconstruct that EMA poorly (its error above `LARGE_ERROR`).

    Raises:
        ValueError, TypeError: not a run folder with snapshots, or bad
            `sigma_rel` or `at`.
    """
    return _reconstructed(run_folder, sigma_rel, at)[0]


def _reconstructed(run_folder, sigma_rel, at=None):
    """`(model, error)`: `posthoc_ema`'s model, and the relative L2 distance
    between the weights its combination of snapshots gives the run's
    updates and those of the profile of width `sigma_rel` (0: exact)."""
    model_path, snapshots = _snapshots_of(run_folder)
    values, error = reconstruction.reconstruct(snapshots, sigma_rel, at)
    if error > LARGE_ERROR:
        warnings.warn(
            f"The EMA of sigma_rel {sigma_rel:g} is reconstructed with an "
            f"error of {error:.2g} (above {LARGE_ERROR:g}): the run's profiles "
            "do not reach that width, and the model averages its weights over "
            "another window. Widths nearer those of the profiles the run "
            "tracked are reconstructed closely, and more snapshots "
            "(--posthoc-snapshots) reach further.",
            stacklevel=3,
        )
    model = reconstruction.without_profiles(files.load_model(model_path))
    if model.guidance_scale is None:  # a model.keras of an earlier release
        model.guidance_scale = files.run_setting(model_path, "guidance_scale", None)
    reconstruction.assign(model, values)
    return model, error


def _out_path(run_folder, out):
    out = os.path.join(run_folder, MODEL_FILE) if out is None else os.fspath(out)
    if not out.endswith(".keras"):
        raise ValueError(f"Argument `out` must end in '.keras'. Received: out={out!r}")
    return out


def write(run_folder, sigma_rel, out=None):
    """Saves `posthoc_ema(run_folder, sigma_rel)` to `out` (`None`:
    `posthoc_ema.keras` in the run folder); returns `(path, error)`, the
    error of its reconstruction (see `posthoc_ema`)."""
    _snapshots_of(run_folder)
    out = _out_path(run_folder, out)
    model, error = _reconstructed(run_folder, sigma_rel)
    files.save_model(model, out)
    return out, error


@dataclasses.dataclass
class SweepResult:
    """What `sweep` wrote and found."""

    rows: list
    best: dict
    fixed: dict
    csv_path: str
    plot_path: str
    model_path: str


def sweep(
    run_folder,
    sigma_rels=None,
    judge_folder=None,
    out=None,
    num_samples=None,
    log=print,
):
    """Judges the post-hoc EMA of a range of widths; keeps the best.

    Writes `posthoc_ema.csv` (a row a width, and one for the run's own EMA)
    and `posthoc_ema.png` in the run folder, and the best model to `out`.

    Args:
        run_folder: str, a `--posthoc-ema` run folder.
        sigma_rels: the widths; `None` for 11 from 0.01 to 0.25.
        judge_folder: held-out images to judge against; `None` for the
            run's own judge (the digits).
        out: the best model's `.keras` path; `None` for
            `posthoc_ema.keras` in the run folder.
        num_samples: images a judgement; `None` for the judge's own (500
            for the digits, half the folder).
        log: callable taking a line. Defaults to `print`.

    Returns:
        `SweepResult`.
    """
    model_path, snapshots = _snapshots_of(run_folder)
    out = _out_path(run_folder, out)
    if sigma_rels is None:
        sigma_rels = posthoc_sweep.widths()
    sigma_rels = list(check_sigma_rels("sigma_rels", sigma_rels))
    for sigma_rel in sigma_rels:  # every width is checked before any work
        reconstruction.coefficients(snapshots, sigma_rel)
    config = files.run_config(run_folder) or {}
    judge, description = posthoc_sweep.run_judge(
        config, judge_folder, num_samples=num_samples
    )
    model = files.load_model(model_path)
    log(f"Judging {len(sigma_rels)} EMA widths: {description}")
    fixed_score = judge(model)
    fixed = {"ema_decay": config.get("ema_decay"), "fd_ratio": fixed_score["fd_ratio"]}
    log(
        f"the run's own EMA (decay {fixed['ema_decay']}): FD/floor "
        f"{fixed['fd_ratio']:.3f}"
    )
    rows, best_model = posthoc_sweep.sweep(model, snapshots, sigma_rels, judge, log=log)
    best = min(rows, key=lambda row: row["fd_ratio"])
    csv_path = os.path.join(run_folder, CSV_FILE)
    with files.atomic_write(csv_path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        writer.writerow({"sigma_rel": "run_ema", "fd_ratio": fixed["fd_ratio"]})
    plot_path = os.path.join(run_folder, PLOT_FILE)
    plot.save_curve(
        plot_path,
        [row["sigma_rel"] for row in rows],
        [row["fd_ratio"] for row in rows],
        f"Post-hoc EMA: {description}",
        "sigma_rel (log)",
        "FD/floor",
        reference=(fixed["fd_ratio"], f"the run's EMA {fixed['ema_decay']}"),
    )
    files.save_model(best_model, out)
    log(
        f"best: sigma_rel {best['sigma_rel']:g}, FD/floor {best['fd_ratio']:.3f}; "
        f"saved to {out}"
    )
    return SweepResult(rows, best, fixed, csv_path, plot_path, out)
