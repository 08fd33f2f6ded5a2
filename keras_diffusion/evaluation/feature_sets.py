"""The features FID and KID compare: a feature extractor, the real images
(a data set's batches, or statistics saved before) and the generated ones,
each extracted once and shared by both metrics.

Real-data statistics (`mu`, `sigma`, `features`, `num_samples`) can be
saved to an `.npz` and reused for every checkpoint.
"""

import math
import os

import keras
import numpy as np

from keras_diffusion import data, metrics
from keras_diffusion.utils import files
from keras_diffusion.utils import images as images_lib

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


def extract(extractor, images):
    """The features of `images`: `extractor`'s, or the flattened pixels
    where it is `None`."""
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


def save_real_statistics(path, gaussian, features):
    metrics.save_statistics(
        path,
        mu=gaussian[0],
        sigma=gaussian[1],
        features=features.astype(np.float32),
        num_samples=np.asarray(len(features)),
    )


def real_set(real, batch_size, save_statistics):
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


def progress_bar(verbose, target, what):
    """A progress bar over `target` images, or `None` when not `verbose`."""
    if not verbose:
        return None
    print(what)
    return keras.utils.Progbar(target, unit_name="image")


def real_features(extractor, batches, num_real, image_shape, verbose=0):
    """The float64 features of the first `num_real` real images (at least 2)."""
    parts, count = [], 0
    progress = progress_bar(verbose, num_real, f"Features of {num_real} real images")
    for batch in batches:
        batch = np.asarray(batch, np.float32)[: num_real - count]
        if batch.shape[1:] != tuple(image_shape):
            raise ValueError(
                f"Real images must have shape (batch, {image_shape}) like "
                f"the model's. Received: a batch of shape {batch.shape}"
            )
        parts.append(extract(extractor, batch))
        count += len(batch)
        if progress is not None:
            progress.update(count)
        if count >= num_real:
            break
    if count < 2:
        raise ValueError(f"The real set must hold at least 2 images. Received: {count}")
    return np.concatenate(parts).astype(np.float64)


def loaded_statistics(loaded):
    """`((mu, sigma) or None, features or None, num_real)` of a statistics
    file's arrays."""
    gaussian = None
    if "mu" in loaded and "sigma" in loaded:
        gaussian = loaded["mu"], loaded["sigma"]
    num_real = int(loaded.get("num_samples", len(loaded.get("features", []))))
    return gaussian, loaded.get("features"), num_real


def generated_features(
    model, extractor, num_samples, batch_size, sampler, guidance_scale, seed, verbose=0
):
    """The float64 features of `num_samples` images generated in batches
    (seeds `seed`, `seed + 1`, ...; balanced labels for a conditional model)."""
    generated = []
    labels, _ = images_lib.class_rows(
        model.num_classes if getattr(model, "conditional", False) else None,
        num_samples,
    )
    progress = progress_bar(verbose, num_samples, f"Generating {num_samples} images")
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
        generated.append(extract(extractor, images))
        if progress is not None:
            progress.update(start + size)
    return np.concatenate(generated).astype(np.float64)
