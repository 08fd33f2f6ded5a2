"""Judging a saved model against a held-out folder: what
`scripts/evaluate.py --judge-folder` runs, over `folder_quality.judge_model`
with the run's own preprocessing and caption column."""

import os
import time

from keras_diffusion.evaluation.folder_quality import judge_model, quality_for
from keras_diffusion.evaluation.report import saved_model_report, write_report
from keras_diffusion.interop.load import load_for_sampling
from keras_diffusion.utils import files


def run_preprocessing(model_path):
    """`(background, resize)` of the folder run that wrote `model_path`
    (its config.json), or `(None, None)` when there is no such run."""
    config = files.run_config(model_path)
    if config is None or config.get("dataset") != "folder":
        return None, None
    return config.get("background"), config.get("resize")


def judge_saved_model(
    model,
    directory,
    output=None,
    sampler=None,
    steps=None,
    seed=0,
    batch_size=64,
    guidance_scale=None,
    *,
    verbose=0,
    **folder_options,
):
    """Judges a saved model against a held-out folder; writes a JSON report.

    What `scripts/evaluate.py --judge-folder` runs.

    Args:
        model: str, the path of a `.keras` file.
        directory: str, the held-out image folder.
        output: str, the JSON file; `None` for `quality.json` in the run
            folder `model`, or next to the `.keras` file.
        sampler, steps, guidance_scale: as `interop.load.load_for_sampling`.
        seed, batch_size, verbose: as `folder_quality.judge_model`.
        **folder_options: `FolderQuality`'s options. `None`, or one not
            given: the run's own `background`, `resize` and
            `caption_column` (its config.json next to the model), else the
            library defaults.

    Returns:
        `(report, output)`: the dict written and the path of the JSON file.
        The report holds the judge's settings as it used them:
        `num_components` at most `num_samples - 1` and the number of
        native features (the PCA's limits).
    """
    loaded, sampler_object, guidance_scale = load_for_sampling(
        model, sampler, steps, guidance_scale, loader=files.load_model
    )
    background, resize = run_preprocessing(model)
    run_options = {
        "background": background,
        "resize": resize,
        "caption_column": files.run_setting(model, "caption_column", None),
    }
    options = {
        **{k: v for k, v in run_options.items() if v is not None},
        **{k: v for k, v in folder_options.items() if v is not None},
    }
    start = time.perf_counter()
    quality = quality_for(loaded, directory, **options)
    score = judge_model(
        loaded,
        quality=quality,
        sampler=sampler_object,
        seed=seed,
        guidance_scale=guidance_scale,
        batch_size=batch_size,
        verbose=verbose,
    )
    score = {
        **score,
        "native_size": quality.native_size,
        "num_components": quality.num_components,
        "background": quality.background,
        "resize": quality.resize,
    }
    report = saved_model_report(
        model,
        os.path.abspath(directory),
        score,
        sampler_object,
        seed,
        guidance_scale,
    )
    report["seconds"] = round(time.perf_counter() - start, 3)
    return report, write_report(report, output, model, "quality.json")
