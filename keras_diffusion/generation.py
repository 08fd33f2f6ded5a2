"""Load a saved model and write generated images: what `scripts/sample.py` runs."""

import os

import numpy as np

from keras_diffusion import images as images_lib


def load_model(path):
    """`keras.saving.load_model(path)` (safe mode) with a clear error.

    Raises:
        ValueError: `path` is not an existing `.keras` file.
    """
    import keras

    path = os.fspath(path)
    if not path.endswith(".keras") or not os.path.isfile(path):
        raise ValueError(
            "Argument `model` must be an existing .keras file. "
            f"Received: model={path!r}"
        )
    import keras_diffusion  # noqa: F401  (registers the serializable classes)

    return keras.saving.load_model(path)


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
    from keras_diffusion.training import build_sampler

    if not (grid or individual or npz):
        raise ValueError(
            "Nothing to write: `grid`, `individual` and `npz` are all False."
        )
    sampler = build_sampler(sampler, steps)
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
            per_class = max(1, num_images // num_classes)
            labels = [i % num_classes for i in range(num_images // per_class)]
            labels = [c for c in labels for _ in range(per_class)]
            labels += [0] * (num_images - len(labels))
            rows = -(-num_images // per_class)
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
    if individual:
        pixels = images_lib.to_uint8(samples)
        for index, image in enumerate(pixels):
            images_lib.save_png(image, os.path.join(output_dir, f"{index:05d}.png"))
        written["images"] = os.path.join(output_dir, "NNNNN.png")
    if npz:
        written["npz"] = os.path.join(output_dir, "samples.npz")
        arrays = {"images": images_lib.to_uint8(samples)}
        if labels is not None:
            arrays["labels"] = np.asarray(labels, np.int32)
        images_lib.save_npz(written["npz"], **arrays)
    return written
