"""Evaluate a model's samples: FID and KID against real images or saved
statistics; `evaluate_saved_model` is what `scripts/evaluate.py` runs.

Features are extracted once per image and fed to both metrics, so InceptionV3
runs once, not twice (`feature_sets`: the extractor, the real and the
generated images' features, the real set's saved statistics).
"""

import inspect
import os
import time
import warnings

import numpy as np

from keras_diffusion import metrics
from keras_diffusion.evaluation import feature_sets

# Public here too, as before the feature sets had a module of their own.
from keras_diffusion.evaluation.feature_sets import (  # noqa: F401
    FEATURE_EXTRACTORS,
    build_feature_extractor,
    real_image_batches,
)
from keras_diffusion.evaluation.report import (
    saved_model_report,
    write_report,
)
from keras_diffusion.interop.load import load_for_sampling
from keras_diffusion.utils import files
from keras_diffusion.utils.checks import check_int


def evaluate_model(
    model,
    real,
    num_samples=1000,
    sampler=None,
    feature_extractor=metrics.INCEPTION_V3,
    weights=None,
    batch_size=64,
    seed=0,
    num_real=None,
    guidance_scale=1.0,
    kid_subsets=100,
    kid_subset_size=1000,
    save_statistics=None,
    verbose=0,
):
    """FID and KID of `num_samples` generated images against a real set.

    A conditional model is sampled with balanced labels (0, 1, ..., 0, 1, ...).

    Args:
        model: a `DiffusionModel`.
        real: the real set: the path of an `.npz` of statistics (`mu` and
            `sigma` for FID, `features` for KID; written by
            `save_statistics`), a NumPy array of images in [-1, 1], or an
            iterable of image batches in [-1, 1] (see `real_image_batches`).
        num_samples: int >= 2, images to generate. Defaults to `1000`.
        sampler: a sampler; `None` for the model's default (its own).
        feature_extractor: see `build_feature_extractor`. Defaults to
            `"inception_v3"`.
        weights: see `build_feature_extractor`. Defaults to `None`.
        batch_size: int, images per generation and extraction call.
            Defaults to `64`.
        seed: int, the generation seed. Defaults to `0`.
        num_real: int or `None` for `num_samples`: real images to use.
        guidance_scale: float, classifier-free guidance. Defaults to `1.0`.
        kid_subsets: int, KID subsets. Defaults to `100`.
        kid_subset_size: int, KID subset size; one that would take a whole
            set is lowered to half the smaller set, with a warning (the
            subsets would all be that set). Defaults to `1000`.
        save_statistics: optional path; the real set's `mu`, `sigma`,
            `features` and `num_samples` are written there as `.npz`.
        verbose: 0, or 1 for a progress bar over the real and the generated
            images. Defaults to `0`.

    Returns:
        dict with `fid`, `kid`, `kid_std` (each `None` when the statistics
        file lacks what it needs), `kid_subset_size` (lowered to half the
        smaller set, with a warning, when it would take a whole set),
        `num_samples`, `num_real`, `features`, `seconds`.
    """
    num_samples = check_int("num_samples", num_samples, 2)
    batch_size = check_int("batch_size", batch_size, 1)
    num_real = num_samples if num_real is None else num_real
    num_real = check_int("num_real", num_real, 2)
    check_int("seed", seed, 0)
    check_int("kid_subsets", kid_subsets, 1)
    check_int("kid_subset_size", kid_subset_size, 2)
    image_shape = getattr(model, "image_shape", None)
    if image_shape is None or not hasattr(model, "generate"):
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={model!r}"
        )
    loaded, real = feature_sets.real_set(real, batch_size, save_statistics)
    extractor, description = build_feature_extractor(feature_extractor, weights)
    start = time.perf_counter()
    if loaded is None:
        real_features = feature_sets.real_features(
            extractor, real, num_real, image_shape, verbose
        )
        real_gaussian, num_real = _gaussian(real_features), len(real_features)
    else:
        real_gaussian, real_features, num_real = feature_sets.loaded_statistics(loaded)
    sampling = (sampler, guidance_scale, seed, verbose)
    generated = feature_sets.generated_features(
        model, extractor, num_samples, batch_size, *sampling
    )
    fid = None if real_gaussian is None else _fid(*real_gaussian, generated)
    kid = kid_std = subset_size = None
    if real_features is not None:
        kid, kid_std, subset_size = _kid(
            real_features, generated, description, kid_subsets, kid_subset_size, seed
        )
    if save_statistics is not None:
        feature_sets.save_real_statistics(save_statistics, real_gaussian, real_features)
    return {
        "fid": fid,
        "kid": kid,
        "kid_std": kid_std,
        "kid_subset_size": subset_size,
        "num_samples": num_samples,
        "num_real": num_real,
        "features": description,
        "seconds": round(time.perf_counter() - start, 3),
    }


def _kid(real_features, generated, description, subsets, subset_size, seed):
    """`(kid, kid_std, subset_size)` of the generated features against the
    real ones."""
    if real_features.shape[1] != generated.shape[1]:
        raise ValueError(
            f"The real features have {real_features.shape[1]} columns but the "
            f"feature extractor ({description}) gives {generated.shape[1]}."
        )
    smaller = min(len(real_features), len(generated))
    size = subset_size
    if size >= smaller:
        # Subsets as large as a set are all that set: every one gives the same
        # score, and their std (0) says nothing. Half the set varies.
        size = max(2, smaller // 2)
        warnings.warn(
            f"KID: subsets of {subset_size} images asked for, but a set holds "
            f"{smaller}; subsets of {size} used instead, so that they differ "
            "and kid_std means something",
            stacklevel=3,
        )
    kid, kid_std = metrics.kernel_distance(
        real_features, generated, subsets, size, seed=seed
    )
    return kid, kid_std, size


def _gaussian(features):
    """Mean and covariance of a (N, d) feature matrix: the FID statistics."""
    return features.mean(0), np.cov(features, rowvar=False)


def _fid(mu, sigma, generated):
    mu = np.asarray(mu, np.float64)
    sigma = np.atleast_2d(np.asarray(sigma, np.float64))
    if mu.shape != (generated.shape[1],):
        raise ValueError(
            f"The real statistics have {mu.shape} features but the generated "
            f"images give {generated.shape[1]}."
        )
    gen_mu, gen_sigma = _gaussian(generated)
    return metrics.frechet_distance(mu, sigma, gen_mu, np.atleast_2d(gen_sigma))


def evaluate_saved_model(
    model,
    dataset=None,
    statistics=None,
    data_path=None,
    output=None,
    *,
    sampler=None,
    steps=None,
    seed=0,
    batch_size=64,
    guidance_scale=None,
    verbose=0,
    **scoring_options,
):
    """Scores a saved model's samples (FID, KID) and writes a JSON report.

    Args:
        model: str, the path of a `.keras` file.
        dataset: the real images: a `keras_diffusion.data` preset name or an
            image folder; or `None` with `statistics`.
        statistics: str, a real statistics `.npz` (see
            `keras_diffusion.metrics.save_statistics`), or `None`.
        data_path: str, a local `.npz` of a keras data set, or `None`.
        output: str, the JSON file; `None` for `evaluation.json` in the run
            folder `model`, or next to the `.keras` file.
        sampler, steps, guidance_scale: as `interop.load.load_for_sampling`.
        seed, batch_size, verbose: as `evaluate_model`; `seed` and
            `batch_size` also draw and batch the real images of `dataset`.
        **scoring_options: the rest of `evaluate_model`'s options
            (`num_samples`, `num_real`, `feature_extractor`, `weights`,
            `kid_subsets`, `kid_subset_size`, `save_statistics`), with its
            defaults. Any other name is a `TypeError`, before the model loads.

    Returns:
        `(report, output)`: the dict written and the path of the JSON file.
    """
    unknown = sorted(set(scoring_options) - SCORING_OPTIONS)
    if unknown:
        raise TypeError(
            f"evaluate_saved_model() got unexpected keyword arguments {unknown}; "
            f"its scoring options are evaluate_model's {sorted(SCORING_OPTIONS)}"
        )
    loaded, sampler_object, guidance_scale = load_for_sampling(
        model, sampler, steps, guidance_scale, loader=files.load_model
    )
    if getattr(loaded, "autoencoder", None) is not None:
        raise ValueError(
            "FID/KID of a latent model (train.py --latent) is not supported yet; "
            "sample it with scripts/sample.py --npz instead. "
            f"Received: model={os.fspath(model)!r}"
        )
    real = statistics
    if statistics is None:
        real = real_image_batches(
            dataset,
            loaded.image_shape,
            batch_size=batch_size,
            seed=seed,
            data_path=data_path,
        )
    scores = evaluate_model(
        loaded,
        real,
        sampler=sampler_object,
        guidance_scale=guidance_scale,
        batch_size=batch_size,
        seed=seed,
        verbose=verbose,
        **scoring_options,
    )
    report = saved_model_report(
        model,
        statistics or dataset,
        scores,
        sampler_object,
        seed,
        guidance_scale,
    )
    return report, write_report(report, output, model, "evaluation.json")


# `evaluate_model`'s options that `evaluate_saved_model` passes on as they
# are: those it does not take or set itself.
SCORING_OPTIONS = frozenset(inspect.signature(evaluate_model).parameters) - {
    "real",
    *inspect.signature(evaluate_saved_model).parameters,
}
