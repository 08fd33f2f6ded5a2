"""Judging a saved model against a held-out folder: what
`scripts/evaluate.py --judge-folder` runs, over `folder_quality.judge_model`
with the run's own preprocessing and caption column."""

import os
import time

from keras_diffusion.data import decode
from keras_diffusion.evaluation.folder_quality import judge_model
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
    background=None,
    resize=None,
    native_size=8,
    num_components=20,
    num_samples=None,
    verbose=0,
    caption_column=None,
):
    """Judges a saved model against a held-out folder; writes a JSON report.

    What `scripts/evaluate.py --judge-folder` runs.

    Args:
        model: str, the path of a `.keras` file.
        directory: str, the held-out image folder.
        output: str, the JSON file; `None` for `quality.json` in the run
            folder `model`, or next to the `.keras` file.
        sampler, steps, guidance_scale: as `interop.load.load_for_sampling`.
        background, resize: `None` for the run's own (its config.json next
            to the model), else the library defaults.
        caption_column: a text model's captions in `directory`'s metadata;
            `None` for its run's column, else `"text"`.
        Others: see `judge_model`.

    Returns:
        `(report, output)`: the dict written and the path of the JSON file.
    """
    loaded, sampler_object, guidance_scale = load_for_sampling(
        model, sampler, steps, guidance_scale, loader=files.load_model
    )
    run_background, run_resize = run_preprocessing(model)
    if caption_column is None:
        caption_column = files.run_setting(model, "caption_column", None)
    if background is None:
        background = run_background or decode.DEFAULT_BACKGROUND
    if resize is None:
        resize = run_resize or decode.DEFAULT_RESIZE
    start = time.perf_counter()
    score = judge_model(
        loaded,
        directory,
        sampler=sampler_object,
        seed=seed,
        guidance_scale=guidance_scale,
        batch_size=batch_size,
        background=background,
        resize=resize,
        native_size=native_size,
        num_components=num_components,
        num_samples=num_samples,
        verbose=verbose,
        caption_column=caption_column,
    )
    score = {
        **score,
        "native_size": native_size,
        "num_components": num_components,
        "background": decode.background_name(background),
        "resize": resize,
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
