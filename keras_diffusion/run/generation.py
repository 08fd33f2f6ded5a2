"""A saved model at work: its samples as files (what `scripts/sample.py` runs)."""

import dataclasses
import os

import numpy as np

from keras_diffusion.conditioning import conditioned_on_text
from keras_diffusion.interop.load import describe, load_for_sampling
from keras_diffusion.utils import files, run_files
from keras_diffusion.utils import images as images_lib


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """How a saved model samples: the settings `sample_to_files` and
    `editing.edit_to_files` share, each a flag of `scripts/sample.py`.

    Attributes:
        sampler: `"ddim"`, `"ddpm"`, `"dpm"`, `"euler"` or `"heun"`, or
            `None` for the sampler `model.generate` uses: the one its run
            sampled `samples.png` with, else its schedule's default (a
            diffusers DDPM checkpoint: DDIM-50 with its scheduler's
            clipping). Defaults to `None`.
        steps: int, sampler steps, or `None`: the model's own sampler's;
            for a named one the process's default steps where it is the
            process's default sampler (18 for Heun on an `EDMSchedule`, 16
            for DPM-Solver on a `FlowMatchSchedule`), else the sampler's own
            default (50 for DDIM). Defaults to `None`.
        guidance_scale: float, classifier-free guidance, or `None`: the
            guidance of the run that wrote `model`, recorded in the `.keras`
            file (for a file of an earlier release, its run folder's
            `config.json`), else 1.0. Defaults to `None`.
        labels: for a class-conditional model, one int for every image, a
            list of one an image, or `None`: rows of classes 0, 1, ... in
            `sample_to_files`, random classes in `edit_to_files`.
            Defaults to `None`.
        seed: int. Defaults to `0`.
        batch_size: int or `None`, images per compiled call. Defaults to `None`.
        use_ema: bool, sample with the EMA weights. Defaults to `True`.
        prompts: for a text model (which needs at least one), a list of
            prompts. `sample_to_files`: a row of the grid each, in turn over
            the `num_images` images (as the labels of a class-conditional
            model's rows), each shown under its image; more prompts than
            `num_images` are refused. `edit_to_files`: one for every image
            or one an image. Defaults to `None`.
        negative_prompts: for a text model, `None` (guidance from the empty
            prompt), one for every prompt, or one for each of `prompts`.
            Defaults to `None`.
        control_images: for a model with a ControlNet (which needs them), a
            folder of control PNGs of its `control_shape` (white is 1), in
            turn over the images (`sample_to_files`). Defaults to `None`.
    """

    sampler: str | None = None
    steps: int | None = None
    guidance_scale: float | None = None
    labels: int | list | None = None
    seed: int = 0
    batch_size: int | None = None
    use_ema: bool = True
    prompts: str | list | None = None
    negative_prompts: str | list | None = None
    control_images: str | None = None


def sample_to_files(
    model,
    output_dir,
    num_images=64,
    *,
    grid=True,
    individual=False,
    npz=False,
    log=None,
    **options,
):
    """Generates `num_images` images and writes them under `output_dir`.

    Args:
        model: a `DiffusionModel`, the path of a `.keras` file, or a
            diffusers folder or Hub id (`keras_diffusion.from_diffusers`).
        output_dir: str, created if missing.
        num_images: int >= 1. Defaults to `64`.
        grid: bool, write `grid.png`. Defaults to `True`.
        individual: bool, write `00000.png`, ... Defaults to `False`.
        npz: bool, write `samples.npz` (`images` uint8 NHWC, and `labels`).
            Defaults to `False`.
        log: optional callable, told in one line how the images are sampled.
        **options: the settings of `SamplingOptions` (`sampler`, `steps`,
            `guidance_scale`, `labels`, `seed`, `batch_size`, `use_ema`,
            `prompts`, `negative_prompts`, `control_images`).

    Returns:
        dict from kind (`"grid"`, `"images"`, `"npz"`) to the path written.
    """
    if not (grid or individual or npz):
        raise ValueError(
            "Nothing to write: `grid`, `individual` and `npz` are all False."
        )
    options = SamplingOptions(**options)
    check_text_run(model, options, num_images)
    model, sampler, guidance_scale = load_for_sampling(
        model, options.sampler, options.steps, options.guidance_scale
    )
    condition, rows = _prompts(model, options, num_images)
    if condition is None:
        labels, rows = _labels(model, options.labels, num_images)
        condition = {"labels": labels}
        said = "a row a class" if rows else "none" if labels is None else "given"
        said = f"labels {said}"
    else:
        said = _said_of_prompts(len(_as_list(options.prompts)), num_images, rows)
    condition.update(controls_for(model, options.control_images, num_images))
    if log is not None:
        log(describe(sampler, model.schedule, num_images, guidance_scale, said))
    samples = model.generate(
        num_images,
        sampler=sampler,
        guidance_scale=guidance_scale,
        seed=options.seed,
        batch_size=options.batch_size,
        use_ema=options.use_ema,
        **condition,
    )
    return _write_samples(samples, condition, rows, output_dir, (grid, individual, npz))


def controls_for(model, folder, num_images):
    """`generate`'s `control` of a ControlNet model: the PNGs of `folder`
    in name order, in turn over `num_images` (`{}` for any other model)."""
    controlnet = getattr(model, "controlnet", None)
    if controlnet is None:
        if folder is not None:
            raise ValueError(
                "Argument `control_images` needs a model with a ControlNet "
                f"(--control); this one has none. Received: control_images={folder!r}"
            )
        return {}
    if folder is None:
        raise ValueError(
            "The model has a ControlNet: `control_images` must name a folder "
            f"of control PNGs of shape {controlnet.control_shape}. Received: "
            "control_images=None"
        )
    controls = read_control_images(folder, controlnet.control_shape)
    return {"control": np.resize(controls, (num_images,) + controls.shape[1:])}


def read_control_images(folder, shape):
    """The control PNGs of `folder` (name order) as float32 `(n, *shape)` in
    [0, 1]; one of another size is refused naming its file."""
    from PIL import Image

    if not os.path.isdir(folder):
        raise ValueError(
            f"Argument `control_images` must be a folder of PNGs. Received: "
            f"control_images={folder!r} (no such folder)"
        )
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith(".png"))
    if not names:
        raise ValueError(
            f"Argument `control_images` holds no .png file. Received: "
            f"control_images={folder!r}"
        )
    height, width, channels = shape
    controls = []
    for name in names:
        with Image.open(os.path.join(folder, name)) as image:
            if image.size != (width, height):
                raise ValueError(
                    f"The control image {os.path.join(folder, name)} is "
                    f"{image.size[0]}x{image.size[1]}; the ControlNet takes "
                    f"{width}x{height}. Received: control_images={folder!r}"
                )
            array = np.asarray(image.convert("L" if channels == 1 else "RGB"))
        controls.append(array.reshape(shape).astype(np.float32) / 255.0)
    return np.stack(controls)


def check_text_run(model, options, num_images=None):
    """Checks `options` (`SamplingOptions`) against the text run whose folder
    `model` names (its `prompts.json` tells one) before the model loads: a
    large model's load is no wait to learn that a flag does not fit. A
    model given otherwise (a file outside a run folder, an object) is
    checked once loaded."""
    run_prompts = _run_prompts(model)
    if run_prompts is not None:
        check_text_options(options, num_images, run_prompts)


def check_text_options(options, num_images=None, run_prompts=None):
    """Refuses what a text model cannot sample from `options`
    (`SamplingOptions`): labels (first: they are the flag out of place),
    no prompts, and more prompts than `num_images` (`None` where the images
    are those edited).

    Args:
        options: `SamplingOptions`.
        num_images: int or `None`.
        run_prompts: the prompts of the model's run, or `None`: examples for
            the refusal of no prompts.

    Raises:
        ValueError: naming the argument and echoing its value.
    """
    if options.labels is not None:
        raise ValueError(
            "Argument `labels` is for a class-conditional model; this one is "
            "conditioned on text: it takes `prompts`. "
            f"Received: labels={options.labels!r}"
        )
    if not options.prompts:
        raise _no_prompts_error(options.prompts, run_prompts)
    count = len(_as_list(options.prompts))
    if num_images is not None and count > num_images:
        raise ValueError(
            f"Argument `prompts` holds {count} prompts, more than "
            f"num_images={num_images}: each takes a row of at least one image, "
            f"so some would be left out: pass num_images={count} or more, or "
            f"fewer prompts. Received: prompts={options.prompts!r}, "
            f"num_images={num_images}"
        )


def _as_list(prompts):
    return [prompts] if isinstance(prompts, str) else list(prompts)


def _said_of_prompts(count, num_images, rows):
    """How the log names `count` prompts over `num_images` images."""
    if rows is not None:
        return f"prompts a row each ({count})"
    least = num_images // count
    return f"{count} prompts in turn, {least} or {least + 1} images each"


def _prompts(model, options, num_images):
    """`(condition, rows)`: `generate`'s prompt arguments for `num_images`
    images, a row a prompt, or `(None, None)` for a model without text."""
    prompts, negative_prompts = options.prompts, options.negative_prompts
    if not conditioned_on_text(model):
        if prompts is not None or negative_prompts is not None:
            raise ValueError(
                "Argument `prompts` needs a text model (trained on captions); "
                f"this one is not. Received: prompts={prompts!r}"
            )
        return None, None
    check_text_options(options, num_images)
    prompts = _as_list(prompts)
    # By index: a prompt may be given twice, with two negative prompts.
    order, rows = images_lib.grid_prompts(list(range(len(prompts))), num_images)
    condition = {"prompts": [prompts[i] for i in order]}
    if negative_prompts is not None:
        negative = _as_list(negative_prompts)
        if len(negative) not in (1, len(prompts)):
            raise ValueError(
                "Argument `negative_prompts` must hold one prompt for all or one "
                f"for each of the {len(prompts)} prompts. Received: "
                f"negative_prompts={negative_prompts!r}"
            )
        negative = negative * len(prompts) if len(negative) == 1 else negative
        condition["negative_prompts"] = [negative[i] for i in order]
    return condition, rows


def _run_prompts(model):
    """The prompts of the grids of the text run that wrote `model` (a run
    folder or the `.keras` file in one), else `None`."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    folder = run_files.folder_of(model)
    if not run_files.is_run_folder(folder):
        return None
    return files.read_json(os.path.join(folder, run_files.RUN_PROMPTS_FILE))


def _no_prompts_error(prompts, run_prompts=None):
    example = ""
    if run_prompts:
        example = f", e.g. its run's {', '.join(map(repr, run_prompts[:2]))}"
    return ValueError(
        f"A text model samples prompts: pass at least one (`prompts`){example}. "
        f"Received: prompts={prompts!r}"
    )


def _labels(model, labels, num_images):
    """`(labels, rows)`: the labels of `num_images` images (`None` for an
    unconditional model) and the grid's rows (one a class by default)."""
    num_classes = getattr(model, "num_classes", None)
    if labels is not None and num_classes is None:
        raise ValueError(
            "Argument `labels` needs a class-conditional model; this one is "
            f"unconditional. Received: labels={labels!r}"
        )
    if num_classes is None:
        return None, None
    if labels is None:
        return images_lib.class_rows(num_classes, num_images)
    if isinstance(labels, int) or len(labels) == 1:
        return [int(np.ravel(labels)[0])] * num_images, None
    if len(labels) != num_images:
        raise ValueError(
            f"Argument `labels` must hold one label or num_images={num_images} "
            f"labels. Received: {len(labels)} labels"
        )
    return labels, None


def _write_samples(samples, condition, rows, output_dir, kinds):
    """Writes what `sample_to_files` was asked for (`kinds`: grid,
    individual, npz); returns what it wrote."""
    grid, individual, npz = kinds
    labels, prompts = condition.get("labels"), condition.get("prompts")
    os.makedirs(output_dir, exist_ok=True)
    written = {}
    if grid:
        written["grid"] = os.path.join(output_dir, "grid.png")
        if prompts is None:
            images_lib.save_grid(samples, written["grid"], rows=rows)
        else:  # each prompt under its image
            images_lib.save_caption_grid(samples, prompts, written["grid"], rows=rows)
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
        if prompts is not None:
            arrays["prompts"] = np.asarray(prompts, str)
        files.save_npz(written["npz"], **arrays)
    return written
