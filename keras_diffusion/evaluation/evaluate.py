"""Evaluate a model's samples: FID and KID against real images or saved
statistics; `evaluate_saved_model` is what `scripts/evaluate.py` runs.

Features are extracted once per image and fed to both metrics, so InceptionV3
runs once, not twice. Real-data statistics (`mu`, `sigma`, `features`,
`num_samples`) can be saved to an `.npz` and reused for every checkpoint.
"""

import math
import os
import time
import warnings

import keras
import numpy as np

from keras_diffusion import data, metrics
from keras_diffusion.evaluation.report import (
    saved_model_report,
    write_report,
)
from keras_diffusion.interop.load import load_for_sampling
from keras_diffusion.utils import files
from keras_diffusion.utils import images as images_lib
from keras_diffusion.utils.checks import check_int

FEATURE_EXTRACTORS = (metrics.INCEPTION_V3, "pixels")


def build_feature_extractor(feature_extractor=metrics.INCEPTION_V3, weights=None):
    """A `FrechetDistance` whose `extract_features` maps images to features.

    Args:
        feature_extractor: `"inception_v3"` (Keras' InceptionV3, pooled 2048
            features), `"pixels"` (the flattened images: cheap, for tests and
            smoke runs, not comparable with published numbers), or the path
            of a `.keras` model mapping images in [-1, 1] to `(batch, d)`
            features, loaded in safe mode. Defaults to `"inception_v3"`.
        weights: for InceptionV3, the path of local
            `include_top=False` weights, or `None` for `"imagenet"` (a
            download). Defaults to `None`.

    Returns:
        `(extractor, description)`: a `FrechetDistance` used only for its
        `extract_features`, and a string naming the features for reports.
    """
    if not isinstance(feature_extractor, (str, os.PathLike)):
        raise TypeError(
            "Argument `feature_extractor` must be 'inception_v3', 'pixels' or "
            "the path of a .keras model. "
            f"Received: feature_extractor={feature_extractor!r}"
        )
    spec = os.fspath(feature_extractor)
    if spec == metrics.INCEPTION_V3:
        weights = "imagenet" if weights is None else os.fspath(weights)
        return metrics.FrechetDistance(spec, weights=weights), f"{spec}:{weights}"
    if weights is not None:
        raise ValueError(
            "Argument `weights` is only for feature_extractor='inception_v3'. "
            f"Received: weights={weights!r}, feature_extractor={spec!r}"
        )
    if spec == "pixels":
        return None, "pixels"
    if not spec.endswith(".keras") or not os.path.isfile(spec):
        raise ValueError(
            "Argument `feature_extractor` must be 'inception_v3', 'pixels' or "
            f"an existing .keras file. Received: feature_extractor={spec!r}"
        )
    # The library's loading: one line for a class not registered.
    model = files.load_model(spec)
    return metrics.FrechetDistance(model), spec


def _features(extractor, images):
    if extractor is None:
        images = np.asarray(images, np.float32)
        return images.reshape(len(images), -1)
    return np.asarray(keras.ops.convert_to_numpy(extractor.extract_features(images)))


def real_image_batches(dataset, image_shape, batch_size=64, seed=0, data_path=None):
    """Batches of real images in [-1, 1] of `image_shape`, from a data set.

    Args:
        dataset: a preset name of `keras_diffusion.data` (`"digits"`,
            `"mnist"`, ...) or the path of an image folder.
        image_shape: `(height, width, channels)` to resize and convert to.
        batch_size: int. Defaults to `64`.
        seed: int, the shuffle, so that a subset is a random one.
        data_path: for a keras data set, a local `.npz` (see
            `from_keras_dataset`). Defaults to `None`.
    """
    if not isinstance(dataset, (str, os.PathLike)):
        raise TypeError(
            "Argument `dataset` must be a preset name or a folder path. "
            f"Received: dataset={dataset!r}"
        )
    dataset = os.fspath(dataset)
    height, width, channels = image_shape
    kwargs = {"image_size": (height, width), "seed": seed, "flip": False}
    if dataset in data.PRESETS:
        kwargs["channels"] = channels
        if data_path is not None:
            kwargs["path"] = data_path
        ds = data.make_dataset(dataset, batch_size, **kwargs)
    elif os.path.isdir(dataset):
        ds = data.make_dataset(
            "folder", batch_size, data_dir=dataset, channels=channels, **kwargs
        )
    else:
        raise ValueError(
            f"Argument `dataset` must be one of {', '.join(data.PRESETS)} or an "
            f"existing image folder. Received: dataset={dataset!r}"
        )
    # The checks above run on the call; the batches come when iterated.
    return (batch[0] if isinstance(batch, tuple) else batch for batch in ds)


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
    loaded, real = _real_set(real, batch_size, save_statistics)
    extractor, description = build_feature_extractor(feature_extractor, weights)
    start = time.perf_counter()
    if loaded is None:
        real_features = _real_features(extractor, real, num_real, image_shape, verbose)
        real_gaussian, num_real = _gaussian(real_features), len(real_features)
    else:
        real_gaussian, real_features, num_real = _loaded_statistics(loaded)
    generated = _generated_features(
        model,
        extractor,
        num_samples,
        batch_size,
        sampler,
        guidance_scale,
        seed,
        verbose,
    )
    fid = None if real_gaussian is None else _fid(*real_gaussian, generated)
    kid = kid_std = subset_size = None
    if real_features is not None:
        kid, kid_std, subset_size = _kid(
            real_features, generated, description, kid_subsets, kid_subset_size, seed
        )
    if save_statistics is not None:
        _save_statistics(save_statistics, real_gaussian, real_features)
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


def _save_statistics(path, gaussian, features):
    metrics.save_statistics(
        path,
        mu=gaussian[0],
        sigma=gaussian[1],
        features=features.astype(np.float32),
        num_samples=np.asarray(len(features)),
    )


def _real_set(real, batch_size, save_statistics):
    """`(loaded, batches)`: the statistics of an `.npz` path (then `None`
    batches), or `None` and `real`'s image batches (an array cut in
    `batch_size` rows)."""
    if isinstance(real, (str, os.PathLike)):
        loaded = metrics.load_statistics(os.fspath(real))
        if not ({"mu", "sigma"} <= set(loaded) or "features" in loaded):
            raise ValueError(
                "Argument `real` must name an .npz with `mu` and `sigma` and/or "
                f"`features`. Received: real={os.fspath(real)!r} with keys "
                f"{sorted(loaded)}"
            )
        if save_statistics is not None:
            raise ValueError(
                "Argument `save_statistics` needs real images, not statistics. "
                f"Received: real={os.fspath(real)!r}"
            )
        return loaded, None
    if isinstance(real, np.ndarray):
        real = [real[i : i + batch_size] for i in range(0, len(real), batch_size)]
    return None, real


def _progress(verbose, target, what):
    """A progress bar over `target` images, or `None` when not `verbose`."""
    if not verbose:
        return None
    print(what)
    return keras.utils.Progbar(target, unit_name="image")


def _real_features(extractor, batches, num_real, image_shape, verbose=0):
    """The float64 features of the first `num_real` real images (at least 2)."""
    parts, count = [], 0
    progress = _progress(verbose, num_real, f"Features of {num_real} real images")
    for batch in batches:
        batch = np.asarray(batch, np.float32)[: num_real - count]
        if batch.shape[1:] != tuple(image_shape):
            raise ValueError(
                f"Real images must have shape (batch, {image_shape}) like "
                f"the model's. Received: a batch of shape {batch.shape}"
            )
        parts.append(_features(extractor, batch))
        count += len(batch)
        if progress is not None:
            progress.update(count)
        if count >= num_real:
            break
    if count < 2:
        raise ValueError(f"The real set must hold at least 2 images. Received: {count}")
    return np.concatenate(parts).astype(np.float64)


def _loaded_statistics(loaded):
    """`((mu, sigma) or None, features or None, num_real)` of a statistics
    file's arrays."""
    gaussian = None
    if "mu" in loaded and "sigma" in loaded:
        gaussian = loaded["mu"], loaded["sigma"]
    num_real = int(loaded.get("num_samples", len(loaded.get("features", []))))
    return gaussian, loaded.get("features"), num_real


def _generated_features(
    model, extractor, num_samples, batch_size, sampler, guidance_scale, seed, verbose=0
):
    """The float64 features of `num_samples` images generated in batches
    (seeds `seed`, `seed + 1`, ...; balanced labels for a conditional model)."""
    generated = []
    labels, _ = images_lib.class_rows(
        model.num_classes if getattr(model, "conditional", False) else None,
        num_samples,
    )
    progress = _progress(verbose, num_samples, f"Generating {num_samples} images")
    for index in range(math.ceil(num_samples / batch_size)):
        start = index * batch_size
        size = min(batch_size, num_samples - start)
        images = model.generate(
            size,
            sampler=sampler,
            labels=None if labels is None else labels[start : start + size],
            guidance_scale=guidance_scale,
            seed=seed + index,
            verbose=0,
        )
        generated.append(_features(extractor, images))
        if progress is not None:
            progress.update(start + size)
    return np.concatenate(generated).astype(np.float64)


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
    num_samples=1000,
    num_real=None,
    sampler=None,
    steps=None,
    seed=0,
    batch_size=64,
    guidance_scale=None,
    feature_extractor="inception_v3",
    weights=None,
    kid_subsets=100,
    kid_subset_size=1000,
    save_statistics=None,
    verbose=0,
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
        save_statistics: str, also write the real set's statistics here.
        sampler, steps, guidance_scale: as `interop.load.load_for_sampling`.
        Others: see `keras_diffusion.evaluation.evaluate_model`.

    Returns:
        `(report, output)`: the dict written and the path of the JSON file.
    """
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
        verbose=verbose,
    )
    report = saved_model_report(
        model,
        statistics or dataset,
        scores,
        sampler_object.name,
        sampler_object,
        seed,
        guidance_scale,
    )
    return report, write_report(report, output, model, "evaluation.json")
