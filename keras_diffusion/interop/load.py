"""One loader for every kind of saved model (`load`), and how the tools
sample a saved model (`load_for_sampling`, `pick_sampler`, `describe`)."""

import os

from keras_diffusion import samplers
from keras_diffusion.interop.diffusers import default_sampler, from_diffusers
from keras_diffusion.models.sampler_choice import default_sampler as own_default
from keras_diffusion.utils import files, run_files


def is_saved_model(source):
    """Whether `source` is a `.keras` file or a run folder (else a diffusers
    folder or a Hub id)."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = os.fspath(source)
    return path.endswith(".keras") or run_files.is_run_folder(path)


def load(source):
    """The `DiffusionModel` of a `.keras` file, a run folder (its
    `model.keras`), a diffusers folder or a Hub id."""
    if is_saved_model(source):
        return files.load_model(os.fspath(source))
    return from_diffusers(source)


def load_for_sampling(
    model, sampler=None, steps=None, guidance_scale=None, loader=load
):
    """`(model, sampler, guidance_scale)` of a model as the tools sample it.

    Args:
        model: a `DiffusionModel`, or the source `loader` loads (a `.keras`
            file, a run folder, a diffusers folder or a Hub id for `load`).
        sampler: a sampler name, or `None` for the model's own (its run's,
            else its process's default; a diffusers checkpoint's DDPM is
            DDIM-50, see `pick_sampler`). A bad name fails before the model
            loads.
        steps: int or `None`, as `pick_sampler` takes it.
        guidance_scale: float, or `None` for the model's own
            (`DiffusionModel(guidance_scale=...)`, which a run records in
            the `.keras` file), else, for a file that records none (an
            earlier release's), the run folder's `config.json`, else 1.0.
        loader: callable, the source to a `DiffusionModel`. Defaults to
            `load`.
    """
    if sampler is not None:
        samplers.get(sampler)
    source = model
    checkpoint = isinstance(model, (str, os.PathLike)) and not is_saved_model(model)
    if isinstance(model, (str, os.PathLike)):
        model = loader(model)
    if guidance_scale is None:
        guidance_scale = getattr(model, "guidance_scale", None)
    if guidance_scale is None:  # a file of an earlier release: its run's
        guidance_scale = files.run_setting(source, "guidance_scale", 1.0)
    return model, pick_sampler(model, sampler, steps, checkpoint), guidance_scale


def pick_sampler(model, name=None, steps=None, checkpoint=False):
    """The sampler of `name` and `steps` for a loaded `model`, checked
    against its process.

    `name=None` is the sampler `model.generate` uses (the model's own: its
    run's, else its process's default), with `steps` when given; but where
    `checkpoint` (a model loaded from a diffusers folder or Hub id), its
    scheduler's `DDPMSampler` (all of its T steps) becomes DDIM of 50 steps
    with the clipping and spacing of that scheduler (docs/interop.md). A
    `.keras` file or a run folder keeps its own sampler, DDPM included. A
    named sampler takes `steps`, else the process's default steps where it
    is the process's default sampler (18 for Heun on an `EDMSchedule`),
    else its own default (50 for DDIM).
    """
    if name is None:
        own = model.sampler or own_default(
            model.schedule, model.schedule.prediction_type
        )
        if not (checkpoint and isinstance(own, samplers.DDPMSampler)):
            if steps is None:
                return own
            return type(own).from_config({**own.get_config(), "num_steps": steps})
        name = "ddim"
    default_name, default_steps = model.schedule.default_sampler(
        model.schedule.prediction_type
    )
    if steps is None and name == default_name:
        steps = default_steps
    if name == "ddim":
        # A diffusers checkpoint's scheduler sets DDIM's clipping.
        sampler = default_sampler(model, num_steps=steps or 50)
    else:
        sampler = samplers.get(name, **({} if steps is None else {"num_steps": steps}))
    sampler.validate(model.schedule)
    return sampler


def describe(sampler, schedule, num_images, guidance_scale, labels):
    """One line saying how `num_images` images are sampled: the sampler as
    its flags, its model calls, the guidance and the condition (`labels`:
    e.g. "labels a row a class")."""
    calls = sampler.evaluations(sampler.steps(schedule))
    guided = guidance_scale != 1.0
    return (
        f"Sampling {num_images} images: --sampler {sampler.name} --steps "
        f"{sampler.steps(schedule)} ({calls * (2 if guided else 1)} model calls "
        f"an image), --guidance-scale {guidance_scale:g}, {labels}"
    )
