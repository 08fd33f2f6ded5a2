"""A saved model editing image files: img2img and inpainting (what
`scripts/sample.py --init-images` runs)."""

import os

import numpy as np

from keras_diffusion.data.decode import load_image
from keras_diffusion.data.directory import load_directory_arrays
from keras_diffusion.interop.load import load
from keras_diffusion.models.sampling import output_shape
from keras_diffusion.run.generation import pick_sampler
from keras_diffusion.utils import files
from keras_diffusion.utils import images as images_lib

# Inputs and results side by side: this many pairs a row of the grid.
PAIRS_PER_ROW = 8


def edit_to_files(
    model,
    output_dir,
    init_images,
    strength=None,
    mask=None,
    sampler=None,
    steps=None,
    guidance_scale=1.0,
    labels=None,
    seed=0,
    batch_size=None,
    npz=False,
    use_ema=True,
):
    """Edits the images of the folder `init_images` and writes the results.

    Args:
        model: a `DiffusionModel`, the path of a `.keras` file or run folder,
            or a diffusers folder or Hub id.
        output_dir: str, created if missing.
        init_images: str, a folder of images, read as training reads a
            folder (resized and cropped to the model's size, transparency
            over white), in file-name order.
        strength: float in [0, 1]: redraw the images (img2img, SDEdit).
        mask: str, one mask image for every input or a folder of one a
            input (file-name order): white is filled, black kept, grey
            blends (inpainting). Exactly one of `strength` and `mask`.
        sampler, steps, guidance_scale, seed, batch_size, use_ema: as
            `generation.sample_to_files`.
        labels: for a conditional model, `None` (random classes), one int,
            or one int an image.
        npz: bool, also write `edits.npz` (`inputs`, `images` uint8 NHWC).

    Returns:
        dict from kind (`"grid"`, `"npz"`) to the path written.
    """
    if (strength is None) == (mask is None):
        raise ValueError(
            "--init-images needs exactly one of --strength S (img2img) and "
            f"--mask PNG|DIR (inpainting). Received: strength={strength!r}, "
            f"mask={mask!r}"
        )
    if isinstance(model, (str, os.PathLike)):
        model = load(model)
    height, width, channels = output_shape(model)
    images = _read_folder(init_images, (height, width), channels, "init_images")
    sampler = pick_sampler(model, sampler, steps)
    if isinstance(labels, (list, tuple)) and len(labels) == 1:
        labels = int(labels[0])  # one for every image
    kwargs = {
        "labels": labels,
        "guidance_scale": guidance_scale,
        "sampler": sampler,
        "seed": seed,
        "batch_size": batch_size,
        "use_ema": use_ema,
    }
    if mask is None:
        results = model.img2img(images, strength, **kwargs)
        shown = images
    else:
        masks = _read_masks(mask, (height, width), len(images))
        results = model.inpaint(images, masks, **kwargs)
        shown = images * (1.0 - masks)  # the filled region grey
    return _write(shown, results, images, output_dir, npz)


def _read_folder(folder, size, channels, flag_name):
    if not os.path.isdir(folder):
        raise ValueError(
            f"Argument `{flag_name}` (--{flag_name.replace('_', '-')}) must be a "
            f"folder of images. Received: {flag_name}={folder!r}"
        )
    pixels = load_directory_arrays(folder, size, channels=channels)[0]
    return pixels.astype(np.float32) / 127.5 - 1.0


def _read_masks(mask, size, count):
    """(count, H, W, 1) in [0, 1]: 1 (white) fills."""
    if os.path.isfile(mask):
        pixels = load_image(mask, size, channels=1, background="black")[0][None]
    elif os.path.isdir(mask):
        pixels = load_directory_arrays(mask, size, channels=1, background="black")[0]
        if len(pixels) != count:
            raise ValueError(
                f"Argument `mask` (--mask) must hold one mask or one an image "
                f"({count} in --init-images). Received: {len(pixels)} masks in "
                f"mask={mask!r}"
            )
    else:
        raise ValueError(
            "Argument `mask` (--mask) must be an image file or a folder of "
            f"them. Received: mask={mask!r}"
        )
    masks = pixels.astype(np.float32) / 255.0
    return np.broadcast_to(masks, (count, *size, 1)).copy()


def _write(shown, results, inputs, output_dir, npz):
    """`grid.png`: rows of inputs over rows of their results."""
    os.makedirs(output_dir, exist_ok=True)
    written = {"grid": os.path.join(output_dir, "grid.png")}
    per_row = min(PAIRS_PER_ROW, len(results))
    rows = []
    for start in range(0, len(results), per_row):
        for array in (shown, results):
            chunk = array[start : start + per_row]
            pad = np.full((per_row - len(chunk), *chunk.shape[1:]), -1.0)
            rows.append(np.concatenate([chunk, pad]))
    images_lib.save_grid(np.concatenate(rows), written["grid"], rows=len(rows))
    if npz:
        written["npz"] = os.path.join(output_dir, "edits.npz")
        files.save_npz(
            written["npz"],
            inputs=images_lib.to_uint8(inputs),
            images=images_lib.to_uint8(results),
        )
    return written
