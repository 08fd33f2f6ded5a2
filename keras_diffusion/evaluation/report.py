"""The JSON report of a saved model's scores, as `scripts/evaluate.py`
writes it (FID / KID in `evaluate`, the folder judge in `folder_quality`)."""

import json
import os

from keras_diffusion.utils import files, run_files


def saved_model_report(model, reference, scores, sampler, seed, guidance_scale):
    """What was scored against what, the scores, and how it was sampled.

    Args:
        model: str, the path of the `.keras` file scored.
        reference: what it was scored against (a path or a data set name).
        scores: dict, the figures, placed after `model` and `reference`.
        sampler: the sampler used; its name and config are recorded.
        seed: int, the sampling seed.
        guidance_scale: float.
    """
    return {
        "model": os.path.abspath(model),
        "reference": reference,
        **scores,
        "sampler": {"name": sampler.name, **sampler.get_config()},
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
