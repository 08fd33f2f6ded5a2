"""A saved model at work: its samples as files, and its scores as a report.

`sample_to_files` is what `scripts/sample.py` runs, `evaluate_saved_model`
what `scripts/evaluate.py` runs.
"""

import json
import os
import zipfile
import zlib

import keras
import numpy as np

from keras_diffusion import evaluation, samplers
from keras_diffusion import images as images_lib


def load_model(path):
    """`keras.saving.load_model(path)` (safe mode) with a clear error.

    Raises:
        ValueError: `path` is not an existing `.keras` file, or it exists but
            is not a readable `.keras` archive (truncated or corrupt).
    """
    path = os.fspath(path)
    if not path.endswith(".keras") or not os.path.isfile(path):
        raise ValueError(
            "Argument `model` must be an existing .keras file. "
            f"Received: model={path!r}"
        )
    # Importing this module imported keras_diffusion, whose classes are now
    # registered for safe-mode loading.
    invalid = (
        f"Argument `model` names a file that exists ({os.path.getsize(path):,} "
        "bytes) but is not a valid .keras archive: it is truncated or corrupt "
        "(a copy cut short, or a save that was interrupted)"
    )
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{invalid}. Received: model={path!r}")
    try:
        return keras.saving.load_model(path)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as error:
        raise ValueError(
            f"{invalid} ({type(error).__name__}: {' '.join(str(error).split())}). "
            f"Received: model={path!r}"
        ) from error


def sample_to_files(
    model,
    output_dir,
    num_images=64,
    sampler="ddim",
    steps=50,
    guidance_scale=1.0,
    labels=None,
    seed=0,
    batch_size=None,
    grid=True,
    individual=False,
    npz=False,
    use_ema=True,
):
    """Generates `num_images` images and writes them under `output_dir`.

    Args:
        model: a `DiffusionModel` or the path of a `.keras` file.
        output_dir: str, created if missing.
        num_images: int >= 1. Defaults to `64`.
        sampler: `"ddim"`, `"ddpm"`, `"dpm"` or `"euler"`. Defaults to `"ddim"`.
        steps: int, sampler steps. Defaults to `50`.
        guidance_scale: float, classifier-free guidance. Defaults to `1.0`.
        labels: for a conditional model, `None` (rows of classes 0, 1, ...),
            one int for every image, or a list of `num_images` ints.
            Defaults to `None`.
        seed: int. Defaults to `0`.
        batch_size: int or `None`, images per compiled call. Defaults to `None`.
        grid: bool, write `grid.png`. Defaults to `True`.
        individual: bool, write `00000.png`, ... Defaults to `False`.
        npz: bool, write `samples.npz` (`images` uint8 NHWC, and `labels`).
            Defaults to `False`.
        use_ema: bool. Defaults to `True`.

    Returns:
        dict from kind (`"grid"`, `"images"`, `"npz"`) to the path written.
    """
    if not (grid or individual or npz):
        raise ValueError(
            "Nothing to write: `grid`, `individual` and `npz` are all False."
        )
    sampler = samplers.get(sampler, num_steps=steps)
    if isinstance(model, (str, os.PathLike)):
        model = load_model(model)
    num_classes = getattr(model, "num_classes", None)
    rows = None
    if labels is not None and num_classes is None:
        raise ValueError(
            "Argument `labels` needs a class-conditional model; this one is "
            f"unconditional. Received: labels={labels!r}"
        )
    if num_classes is not None:
        if labels is None:
            labels, rows = images_lib.class_rows(num_classes, num_images)
        elif isinstance(labels, int) or len(labels) == 1:
            labels = [int(np.ravel(labels)[0])] * num_images
        elif len(labels) != num_images:
            raise ValueError(
                f"Argument `labels` must hold one label or num_images={num_images} "
                f"labels. Received: {len(labels)} labels"
            )
    samples = model.generate(
        num_images,
        sampler=sampler,
        labels=labels,
        guidance_scale=guidance_scale,
        seed=seed,
        batch_size=batch_size,
        use_ema=use_ema,
    )
    os.makedirs(output_dir, exist_ok=True)
    written = {}
    if grid:
        written["grid"] = os.path.join(output_dir, "grid.png")
        images_lib.save_grid(samples, written["grid"], rows=rows)
    pixels = images_lib.to_uint8(samples) if individual or npz else None
    if individual:
        for index, image in enumerate(pixels):
            images_lib.save_png(image, os.path.join(output_dir, f"{index:05d}.png"))
        written["images"] = os.path.join(output_dir, "NNNNN.png")
    if npz:
        written["npz"] = os.path.join(output_dir, "samples.npz")
        arrays = {"images": pixels}
        if labels is not None:
            arrays["labels"] = np.asarray(labels, np.int32)
        images_lib.save_npz(written["npz"], **arrays)
    return written


def evaluate_saved_model(
    model,
    dataset=None,
    statistics=None,
    data_dir=None,
    output=None,
    num_samples=1000,
    num_real=None,
    sampler="ddim",
    steps=50,
    seed=0,
    batch_size=64,
    guidance_scale=1.0,
    feature_extractor="inception_v3",
    weights=None,
    kid_subsets=100,
    kid_subset_size=1000,
    save_statistics=None,
):
    """Scores a saved model's samples (FID, KID) and writes a JSON report.

    Args:
        model: str, the path of a `.keras` file.
        dataset: the real images: a `keras_diffusion.data` preset name or an
            image folder; or `None` with `statistics`.
        statistics: str, a real statistics `.npz` (see
            `keras_diffusion.metrics.save_statistics`), or `None`.
        data_dir: str, a local `.npz` of a keras data set, or `None`.
        output: str, the JSON file; `None` for `evaluation.json` next to the
            model.
        save_statistics: str, also write the real set's statistics here.
        Others: see `keras_diffusion.evaluation.evaluate_model`; `sampler`
            and `steps` as in `sample_to_files`.

    Returns:
        `(report, output)`: the dict written and the path of the JSON file.
    """
    sampler_object = samplers.get(sampler, num_steps=steps)
    loaded = load_model(model)
    if getattr(loaded, "autoencoder", None) is not None:
        raise ValueError(
            "FID/KID of a latent model (train.py --latent) is not supported yet; "
            "sample it with scripts/sample.py --npz instead. "
            f"Received: model={os.fspath(model)!r}"
        )
    real = statistics
    if statistics is None:
        real = evaluation.real_image_batches(
            dataset,
            loaded.image_shape,
            batch_size=batch_size,
            seed=seed,
            data_dir=data_dir,
        )
    scores = evaluation.evaluate_model(
        loaded,
        real,
        num_samples=num_samples,
        sampler=sampler_object,
        feature_extractor=feature_extractor,
        weights=weights,
        batch_size=batch_size,
        seed=seed,
        num_real=num_real,
        guidance_scale=guidance_scale,
        kid_subsets=kid_subsets,
        kid_subset_size=kid_subset_size,
        save_statistics=save_statistics,
    )
    report = {
        "model": os.path.abspath(model),
        "reference": statistics or dataset,
        **scores,
        "sampler": {"name": sampler, **sampler_object.get_config()},
        "seed": seed,
        "guidance_scale": guidance_scale,
    }
    if output is None:
        output = os.path.join(
            os.path.dirname(os.path.abspath(model)), "evaluation.json"
        )
    with images_lib.atomic_write(output, suffix=".json") as tmp:
        with open(tmp, "w") as f:
            json.dump(report, f, indent=2)
    return report, output
