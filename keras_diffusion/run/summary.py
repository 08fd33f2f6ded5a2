"""What a run shows before it trains: the recipe it took, the line on its
data and model, with `data.png` (what the model sees: captions under their
images, a ControlNet run's controls beside them), and the final grid's
cost in training steps for the time estimate."""

import numpy as np

from keras_diffusion import data as data_lib
from keras_diffusion import samplers
from keras_diffusion.adapters.lora import is_factor
from keras_diffusion.models.unet import UNet
from keras_diffusion.models.unet_sizes import gpu_present
from keras_diffusion.utils import images as images_lib


def _network(image_size, widths, schedule, timesteps):
    return (
        f"{image_size}x{image_size}, U-Net widths {','.join(map(str, widths))}, "
        f"{schedule} schedule of T={timesteps}"
    )


def recipe_line(config):
    """The line naming the recipe a preset's run took and why, what it
    trains, and the flag of each other recipe; `None` for a dataset of one
    recipe or none (a folder).

    Args:
        config: the resolved `TrainConfig`.
    """
    preset = data_lib.PRESETS.get(config.dataset)
    if preset is None or len(preset.recipes) < 2 or config.recipe is None:
        return None
    if config.recipe != preset.recipe_name(gpu=gpu_present()):
        why = "as asked (--recipe)"
    elif config.recipe == preset.cpu_recipe:
        why = "as no GPU is found"
    else:
        why = "as a GPU is found"
    recipe = preset.recipes[config.recipe]
    trains = _network(
        config.image_size, config.widths, config.schedule, config.timesteps
    )
    line = (
        f"Recipe: {config.recipe} of {config.dataset}, {why} ({recipe.measured}): "
        f"{trains}, {config.epochs} epochs of batch {config.batch_size}."
    )
    for name, other in preset.recipes.items():
        if name != config.recipe:
            network = _network(
                other.image_size,
                other.model["widths"],
                other.beta_schedule,
                other.timesteps,
            )
            line += f" The {name} recipe is --recipe {name} ({network})."
    return line


def show_data(config, dataset, model, steps_per_epoch, path, batch=None):
    """Writes a grid of one training batch to `path`; returns a one-line
    summary, after the run's `recipe_line` where it has one.

    The batch comes from the training pipeline itself, after every step of
    preprocessing, so the grid is what the model sees; `batch` is one drawn
    already (each draw moves the pipeline's shuffle on by an epoch).
    """
    batch = next(iter(dataset.take(1))) if batch is None else batch
    images = np.asarray(batch[0] if isinstance(batch, tuple) else batch)
    if getattr(model, "autoencoder", None) is not None:
        images = _decoded_means(model.autoencoder, images[:16])
    captions = getattr(dataset, "captions", None)
    controlnet = getattr(model, "controlnet", None)
    if controlnet is not None and controlnet.extractor is not None:
        # A ControlNet run: each image after the control made of it.
        count = min(32, len(images))
        count -= count % 4 if count >= 4 else 0  # four pairs a row
        tiles = images_lib.beside_controls(
            controlnet.extract(images[:count]), images[:count]
        )
        images_lib.save_grid(tiles, path, rows=max(1, count // 4))
    elif captions is not None and isinstance(batch, tuple):
        # Captioned data: each caption under its image.
        texts = np.asarray(batch[1])[: len(images[:64])]
        images_lib.save_caption_grid(images[:64], texts, path)
    else:
        images_lib.save_grid(images[:64], path)
    source = f" from {config.data_dir!r}" if config.data_dir else ""
    count = getattr(dataset, "num_examples", None)
    count = f"{count:,} images" if count is not None else "images"
    classes = len(getattr(dataset, "class_names", None) or [])
    labelled = f"{classes} classes" if config.class_conditional else "no labels"
    if captions is not None:
        labelled = f"{len(set(captions)):,} distinct captions"
    size = f" (--model-size {config.model_size})" if config.model_size else ""
    if config.lora_rank is not None:
        trainable = sum(int(np.prod(v.shape)) for v in model.denoiser.trainable_weights)
        size += f", {trainable:,} of them trainable (--lora-rank {config.lora_rank})"
    if controlnet is not None:
        size += (
            f", frozen; a ControlNet of {controlnet.count_params() / 1e6:.2f} M trains"
        )
    steps = f"{steps_per_epoch} steps of {config.batch_size} an epoch"
    if config.grad_accum > 1:
        # Progress, time estimates and step backups count batches; the
        # EMA, the learning rate's decay and a curriculum span the updates.
        steps += (
            f", a weight update every {config.grad_accum} "
            f"(--grad-accum {config.grad_accum})"
        )
    recipe = recipe_line(config)
    return ("" if recipe is None else recipe + "\n") + (
        f"Data: {count}{source} ({config.dataset}), {labelled}, shape "
        f"{'x'.join(str(d) for d in images.shape[1:])}, values in "
        f"[{images.min():.2f}, {images.max():.2f}] (first batch); "
        f"{steps}; {_network_name(model)} "
        f"{_base_params(model) / 1e6:.2f} M parameters{size}. "
        f"A training batch: {path}"
    )


def _network_name(model):
    """ "U-Net", or the denoiser's class where the model has no U-Net (a
    keras-hub preset's MMDiT)."""
    denoiser = model.denoiser
    return "U-Net" if isinstance(denoiser, UNet) else type(denoiser).__name__


def _base_params(model):
    """The denoiser's parameters, LoRA factors left out."""
    return sum(
        int(np.prod(v.shape)) for v in model.denoiser.weights if not is_factor(v)
    )


def _decoded_means(autoencoder, moments):
    """Cached moments seen as images: their posterior means, scaled as the
    autoencoder scales its latents, decoded."""
    mean = moments[..., : moments.shape[-1] // 2]
    return np.asarray(autoencoder.decode(autoencoder.scaled(mean)))


def sampling_cost(config):
    """The final sample grid's work in training steps: a sampler step is one
    forward pass (two with guidance) and a training step about three."""
    guided = config.guidance_scale != 1.0  # labels or captions
    sampler = samplers.get(config.sampler, num_steps=config.sampling_steps)
    calls = sampler.evaluations(config.sampling_steps)
    passes = config.num_samples * calls * (2 if guided else 1)
    return passes / (3 * config.batch_size)
