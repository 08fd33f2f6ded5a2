"""Choose the EMA length after training: the post-hoc EMA of a range of
widths (`keras_diffusion.averages.posthoc`), each judged by the run's
judge, the best kept.

The judge is the run's own: for the digits, `digits_quality` (labels 0-9 at
guidance 1, or `generate(n)` for an unconditional model); for anything else
a held-out image folder (`folder_quality`, `--judge-folder`). Every width
samples with the same seed, so the curve's differences are the weights'.
"""

import numpy as np

from keras_diffusion.averages import posthoc
from keras_diffusion.averages.power_ema import gamma_of
from keras_diffusion.evaluation import digits_quality, folder_quality
from keras_diffusion.models.sampling import output_shape
from keras_diffusion.utils.checks import check_int

# From just above EDM2's narrowest useful width to near the widest profile.
DEFAULT_RANGE = (0.01, 0.25)


def widths(count=11, low=DEFAULT_RANGE[0], high=DEFAULT_RANGE[1]):
    """`count` widths spaced evenly in log between `low` and `high`."""
    count = check_int("count", count, 2)
    return [float(f"{w:.4g}") for w in np.geomspace(low, high, count)]


def run_judge(run_config, judge_folder=None, seed=0, num_samples=None):
    """`(judge, description)`: `judge(model)` scores a model of the run whose
    `config.json` is `run_config` (a dict), FD/floor in `"fd_ratio"`.

    Raises:
        ValueError: a run of neither the digits nor a folder given.
    """
    if judge_folder is not None:
        quality = None

        def judge(model):
            nonlocal quality
            if quality is None:  # its floor is measured once
                shape = output_shape(model)
                quality = folder_quality.FolderQuality(
                    judge_folder,
                    shape[:2],
                    channels=shape[2],
                    background=run_config.get("background") or "white",
                    resize=run_config.get("resize") or "crop",
                    num_samples=num_samples,
                    # A text model samples the held-out captions, read
                    # from the run's column.
                    caption_column=folder_quality.caption_column_of(
                        model, run_config.get("caption_column")
                    ),
                )
            return folder_quality.judge_model(model, quality=quality, seed=seed)

        return judge, f"FD/floor against {judge_folder}"
    if run_config.get("dataset") != "digits":
        raise ValueError(
            "Only a digits run has a judge of its own; pass a folder of held-out "
            "images to judge this run's samples against (--judge-folder DIR). "
            f"Received: a run of dataset={run_config.get('dataset')!r}"
        )
    quality = None

    def judge(model):
        nonlocal quality
        if quality is None:
            quality = digits_quality.DigitsQuality(
                image_size=model.image_shape[0], num_samples=num_samples or 500
            )
        kind = "conditional" if model.conditional else "generate"
        return digits_quality.judge_model(
            model, kinds=(kind,), quality=quality, seed=seed
        )[kind]

    return judge, "FD/floor of the digits (labels 0-9 at guidance 1)"


def sweep(model, folder, sigma_rels, judge, at=None, log=None):
    """Judges the post-hoc EMA of each width in `sigma_rels`.

    Args:
        model: the run's `DiffusionModel` (its weights' structure).
        folder: the run's snapshot folder.
        sigma_rels: the widths to judge.
        judge: `judge(model)` -> a dict with `"fd_ratio"` (`run_judge`).
        at: the update count to reconstruct at; `None` for the newest
            snapshot's (the run's end).
        log: optional callable taking a line, one a width.

    Returns:
        `(rows, best)`: a row a width (`sigma_rel`, `gamma`, `fd_ratio`,
        `weights_error`: the reconstruction's relative L2 error over the
        run's updates), and a model without profiles whose EMA is the best
        width's.
    """
    if not sigma_rels:
        raise ValueError(f"Argument `sigma_rels` is empty. Received: {sigma_rels!r}")
    candidate = posthoc.without_profiles(model)
    rows, best = [], None
    for sigma_rel in sigma_rels:
        values, error = posthoc.reconstruct(folder, sigma_rel, at)
        posthoc.assign(candidate, values)
        score = judge(candidate)
        row = {
            "sigma_rel": sigma_rel,
            "gamma": round(gamma_of(sigma_rel), 4),
            "fd_ratio": round(float(score["fd_ratio"]), 4),
            "weights_error": float(f"{error:.3g}"),
        }
        rows.append(row)
        if best is None or row["fd_ratio"] < best[0]["fd_ratio"]:
            best = (row, values)
        if log is not None:
            log(
                f"sigma_rel {sigma_rel:<6g} FD/floor {row['fd_ratio']:.3f} "
                f"(weights' error {error:.2g})"
            )
    posthoc.assign(candidate, best[1])
    return rows, candidate
