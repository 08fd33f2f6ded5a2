"""The JSON report of a saved model's scores, as `scripts/evaluate.py`
writes it (FID / KID in `evaluate`, the folder judge in `folder_quality`)."""

import json
import os

from keras_diffusion import samplers
from keras_diffusion.interop.load import pick_sampler
from keras_diffusion.utils import files, run_files


def saved_model_report(
    model, reference, scores, sampler_name, sampler, seed, guidance_scale
):
    """What was scored against what, the scores, and how it was sampled.

    Args:
        model: str, the path of the `.keras` file scored.
        reference: what it was scored against (a path or a data set name).
        scores: dict, the figures, placed after `model` and `reference`.
        sampler_name: str, the name the sampler was asked for by.
        sampler: the sampler used; its config is recorded.
        seed: int, the sampling seed.
        guidance_scale: float.
    """
    return {
        "model": os.path.abspath(model),
        "reference": reference,
        **scores,
        "sampler": {"name": sampler_name, **sampler.get_config()},
        "seed": seed,
        "guidance_scale": guidance_scale,
    }


def write_report(report, output, model, default_name):
    """Writes `report` as indented JSON (through a temporary file) to
    `output`, or with `output=None` to `default_name` in the run folder
    `model` (a run's own, not beside it, where another run's would land) or
    next to the `model` file; returns the path written."""
    if output is None:
        output = os.path.join(run_files.folder_of(model), default_name)
    with files.atomic_write(output, suffix=".json") as tmp:
        with open(tmp, "w") as f:
            json.dump(report, f, indent=2)
    return output


def load_for_sampling(model, sampler=None, steps=None, guidance_scale=None):
    """`(loaded, sampler, guidance_scale)` of a saved model as the tools
    sample it (the sampling arguments of `evaluate_saved_model` and
    `folder_quality.judge_saved_model`).

    Args:
        model: str, the path of a `.keras` file or run folder.
        sampler: a sampler name, or `None` for the model's own (its run's,
            else its process's default). A bad name fails before the model
            loads.
        steps: int or `None`, as `keras_diffusion.interop.load.pick_sampler`
            takes it.
        guidance_scale: float, or `None` for the run's (its `config.json`),
            1.0 for a model outside a run folder.
    """
    if sampler is not None:
        samplers.get(sampler)
    if guidance_scale is None:
        guidance_scale = run_files.run_setting(model, "guidance_scale", 1.0)
    loaded = files.load_model(model)
    return loaded, pick_sampler(loaded, sampler, steps), guidance_scale
