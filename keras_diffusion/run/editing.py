"""A saved model editing image files: img2img and inpainting (what
`scripts/sample.py --init-images` runs)."""

import os

import numpy as np

from keras_diffusion.conditioning import conditioned_on_text
from keras_diffusion.data.decode import load_image
from keras_diffusion.data.directory import load_directory_arrays
from keras_diffusion.interop.load import load_for_sampling
from keras_diffusion.models.sampling import output_shape
from keras_diffusion.run.generation import (
    SamplingOptions,
    check_text_options,
    check_text_run,
    controls_for,
)
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
    *,
    npz=False,
    **options,
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
            blends (inpainting). Exactly one of `strength` and `mask`. A
            mask has the size of its image, fitted to the model's size as
            the image is, or the model's size; another size is refused
            (a resize could no longer match the image's crop).
        npz: bool, also write `edits.npz` (`inputs`, `images` uint8 NHWC).
        **options: the settings of `generation.SamplingOptions`; a text
            model needs `prompts` (one for every image or one an image),
            and takes no `labels`.

    Returns:
        dict from kind (`"grid"`, `"npz"`) to the path written.
    """
    if (strength is None) == (mask is None):
        raise ValueError(
            "--init-images needs exactly one of --strength S (img2img) and "
            f"--mask PNG|DIR (inpainting). Received: strength={strength!r}, "
            f"mask={mask!r}"
        )
    options = SamplingOptions(**options)
    check_text_run(model, options)
    model, sampler, guidance_scale = load_for_sampling(
        model, options.sampler, options.steps, options.guidance_scale
    )
    text = conditioned_on_text(model)
    if text:
        check_text_options(options)
    height, width, channels = output_shape(model)
    images, sizes = _read_folder(init_images, (height, width), channels)
    if text:
        _check_prompt_counts(options, len(images), init_images)
    labels = options.labels
    if isinstance(labels, (list, tuple)) and len(labels) == 1:
        labels = int(labels[0])  # one for every image
    kwargs = {
        **_prompt_arguments(options.prompts, options.negative_prompts),
        "labels": labels,
        "guidance_scale": guidance_scale,
        "sampler": sampler,
        "seed": options.seed,
        "batch_size": options.batch_size,
        "use_ema": options.use_ema,
        **controls_for(model, options.control_images, len(images)),
    }
    if mask is None:
        results = model.img2img(images, strength, **kwargs)
        shown = images
    else:
        masks = _read_masks(mask, (height, width), sizes)
        results = model.inpaint(images, masks, **kwargs)
        shown = images * (1.0 - masks)  # the filled region grey
    return _write(shown, results, images, output_dir, npz)


def _prompt_arguments(prompts, negative_prompts):
    """The prompt arguments given (one for every image where one is given)."""
    given = {"prompts": prompts, "negative_prompts": negative_prompts}
    return {
        name: value[0]
        if isinstance(value, (list, tuple)) and len(value) == 1
        else value
        for name, value in given.items()
        if value is not None
    }


def _check_prompt_counts(options, count, folder):
    """A text model edits with one prompt (and negative prompt) for every
    image or one for each of the `count` images of `folder`: said apart
    from `sample_to_files`' rows, where `num_images` counts the images."""
    for name in ("prompts", "negative_prompts"):
        value = getattr(options, name)
        if value is None or isinstance(value, str) or len(value) in (1, count):
            continue
        raise ValueError(
            f"With `init_images`, `{name}` must hold one prompt for every image "
            f"or one for each of the {count} images of `init_images` (without "
            "`init_images`, prompts take a row of the grid each). Received: "
            f"{len(value)} prompts, {name}={value!r}, init_images={folder!r}"
        )


def _read_folder(folder, size, channels):
    """The images of `folder` in [-1, 1], and the size of each file."""
    if not os.path.isdir(folder):
        raise ValueError(
            "Argument `init_images` must be a folder of images. "
            f"Received: init_images={folder!r}"
        )
    pixels, _, _, paths = load_directory_arrays(folder, size, channels=channels)
    return pixels.astype(np.float32) / 127.5 - 1.0, [_file_size(p) for p in paths]


def _file_size(path):
    """`(width, height)` of an image file, after its EXIF orientation."""
    return load_image(path, (1, 1), channels=1)[1]


def _read_masks(mask, size, image_sizes):
    """(count, H, W, 1) in [0, 1] (1, white, fills): each mask fitted as the
    image it masks, of whose size (or the model's) it must be."""
    count = len(image_sizes)
    if os.path.isfile(mask):
        paths = [mask] * count
    elif os.path.isdir(mask):
        paths = load_directory_arrays(mask, size, channels=1)[3]
        if len(paths) != count:
            raise ValueError(
                f"Argument `mask` must hold one mask or one an image "
                f"({count} in --init-images). Received: {len(paths)} masks in "
                f"mask={mask!r}"
            )
    else:
        raise ValueError(
            "Argument `mask` must be an image file or a folder of them. "
            f"Received: mask={mask!r}"
        )
    model_size = size[::-1]
    for path, image_size in zip(paths, image_sizes, strict=True):
        mask_size = _file_size(path)
        if mask_size not in (image_size, model_size):
            raise ValueError(
                f"Argument `mask` must have the size of its image "
                f"({_wxh(image_size)}) or the model's ({_wxh(model_size)}), so "
                f"that it fits where the image is cropped. Received: "
                f"{path!r} of {_wxh(mask_size)}"
            )
    # Fitted as the images are: a mask of an image's size is cropped with it.
    pixels = np.stack(
        [load_image(p, size, channels=1, background="black")[0] for p in paths]
    )
    return pixels.astype(np.float32) / 255.0


def _wxh(size):
    return f"{size[0]}x{size[1]}"


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
