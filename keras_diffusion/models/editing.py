"""Editing images with a `DiffusionModel`: `inpaint` and `img2img`.

Both run the sampler's own compiled loop (`keras_diffusion.samplers.loop`):
inpainting keeps the input's region, noised again to the level of each step
(RePaint's replacement; `RePaintSampler` adds its resampling), and img2img
(SDEdit) starts the loop part-way, from the input noised to that step.
"""

import warnings

import numpy as np
from keras import ops

from keras_diffusion.models import validation
from keras_diffusion.models.sampling import output_shape
from keras_diffusion.models.sampling_run import SamplingRun
from keras_diffusion.utils.checks import check_float


def check_images(model, images):
    """`images` as float32 `(n, H, W, C)` in [-1, 1] of the model's images."""
    try:
        array = np.asarray(images, np.float32)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Argument `images` must be a float array. Received: images={images!r}"
        ) from error
    shape = output_shape(model)
    if array.ndim != 4 or array.shape[1:] != shape or len(array) == 0:
        raise ValueError(
            f"Argument `images` must have shape (n, {', '.join(map(str, shape))}), "
            "the model's images. "
            f"Received: images of shape {tuple(np.shape(images))}"
        )
    if not np.all(np.isfinite(array)) or array.min() < -1.0 or array.max() > 1.0:
        raise ValueError(
            "Argument `images` must hold finite values in [-1, 1] (the model's "
            f"scale). Received: images in [{np.nanmin(array):.3g}, "
            f"{np.nanmax(array):.3g}]"
        )
    return array


def check_mask(mask, shape):
    """`mask` (1 fills, 0 keeps) as float32 `(n, H, W, 1 or C)` for images of
    `shape`: it may be `(H, W)`, `(H, W, 1|C)`, `(n, H, W)` or `(n, H, W,
    1|C)`, with values in [0, 1]."""
    try:
        array = np.asarray(mask, np.float32)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Argument `mask` must be a float array. Received: mask={mask!r}"
        ) from error
    n, height, width, channels = shape
    if array.ndim == 2:  # (H, W)
        array = array[None, ..., None]
    elif array.ndim == 3 and array.shape == (n, height, width):
        array = array[..., None]
    elif array.ndim == 3:  # (H, W, 1 or C)
        array = array[None]
    ok = (
        array.ndim == 4
        and array.shape[0] in (1, n)
        and array.shape[1:3] == (height, width)
        and array.shape[3] in (1, channels)
    )
    if not ok:
        raise ValueError(
            f"Argument `mask` must have shape (H, W), (H, W, 1), (n, H, W) or "
            f"(n, H, W, 1 or C) for images of shape {tuple(shape)}. "
            f"Received: mask of shape {tuple(np.shape(mask))}"
        )
    if not np.all(np.isfinite(array)) or array.min() < 0.0 or array.max() > 1.0:
        raise ValueError(
            "Argument `mask` must hold values in [0, 1] (1 fills, 0 keeps). "
            f"Received: mask in [{np.nanmin(array):.3g}, {np.nanmax(array):.3g}]"
        )
    full = (n, height, width, array.shape[3])
    return np.ascontiguousarray(np.broadcast_to(array, full))


# A sampler of fewer steps spaces its strengths more than 1/20 apart: a
# strength between two of them is said to run as the lower one.
_FINE_STEPS = 20


def warn_if_rounded(strength, steps):
    """Warns where img2img's `int(steps * strength)` steps lose `strength`:
    it rounds to no step (the images come back unchanged), or, on a sampler
    of under 20 steps, down to the steps of a lower strength."""
    kept = int(steps * strength)
    if kept == 0 and strength > 0:
        warnings.warn(
            f"Argument `strength` rounds to no step of the sampler's {steps}: "
            f"strength={strength} returns the images unchanged, as every "
            f"strength below {1 / steps:.3g} does (img2img runs int(steps * "
            "strength) steps).",
            stacklevel=3,
        )
    elif steps < _FINE_STEPS and not np.isclose(steps * strength, kept):
        warnings.warn(
            f"Argument `strength` rounds down to {kept} of the sampler's "
            f"{steps} steps: strength={strength} gives the images of every "
            f"strength in [{kept / steps:.3g}, {(kept + 1) / steps:.3g}) "
            "(img2img runs int(steps * strength) steps; a sampler of more "
            "steps tells them apart).",
            stacklevel=3,
        )


class EditingMixin:
    """`DiffusionModel`'s editing methods, on its sampling machinery: the
    public `sampler_for` and `sample_run` of `SamplingMixin`."""

    def inpaint(
        self,
        images,
        mask,
        labels=None,
        guidance_scale=1.0,
        sampler=None,
        seed=None,
        batch_size=None,
        use_ema=True,
        verbose="auto",
        prompts=None,
        negative_prompts=None,
        control=None,
        control_scale=1.0,
    ):
        """Fills the `mask` region of `images`, keeping the rest.

        After each step of the sampler the kept region is the input noised
        to the current noise level (RePaint's replacement), so the model
        fills the masked region in agreement with it; after the last step
        the kept region is the input itself. `sampler=RePaintSampler(...)`
        adds RePaint's resampling (jumps back up the chain), which
        harmonises the two regions at more model calls. It works on every
        schedule the sampler runs on (VP, EDM, flow matching), with guidance
        for a class-conditional model. On a latent model the images are
        encoded (the posterior mean) and the mask is reduced to the latent
        grid, keeping a latent cell only where the whole 8x8 block is kept;
        the decoded kept region is then the autoencoder's reconstruction.

        Args:
            images: float array `(n, H, W, C)` in [-1, 1], the model's image
                shape.
            mask: float array, 1 where new content is generated and 0 where
                the image is kept (Stable Diffusion's convention; diffusers'
                `RePaintPipeline` takes the opposite), values in [0, 1]
                blend; `(H, W)`, `(H, W, 1)`, `(n, H, W)` or `(n, H, W, 1
                or C)`.
            labels, guidance_scale, seed, batch_size, use_ema, verbose,
                prompts, negative_prompts, control, control_scale: as
                `generate`; with the same seed, a mask of ones gives
                `generate`'s images.
            sampler: a sampler, its name or config; `None` for the model's
                default (as `generate`).

        Returns:
            NumPy float32 `(n, H, W, C)` in [-1, 1].
        """
        sampler = self.sampler_for(sampler)
        images = check_images(self, images)
        keep = 1.0 - check_mask(mask, images.shape)
        latents, keep = self._edit_inputs(images, keep)
        run = _edit_run(
            self,
            sampler,
            (labels, prompts, negative_prompts),
            guidance_scale,
            seed,
            batch_size,
            use_ema,
            control=(control, control_scale),
        )
        inputs = (latents, keep)
        return self.sample_run(run, len(images), verbose, True, ("inpaint",), inputs)

    def img2img(
        self,
        images,
        strength,
        labels=None,
        guidance_scale=1.0,
        sampler=None,
        seed=None,
        batch_size=None,
        use_ema=True,
        verbose="auto",
        prompts=None,
        negative_prompts=None,
        control=None,
        control_scale=1.0,
    ):
        """Redraws `images` at `strength` (SDEdit): noise them part-way, then
        sample back.

        With a sampler of `steps` steps, the images are noised to the level
        of step `steps - int(steps * strength)` and the sampler runs the
        `int(steps * strength)` steps left (diffusers' img2img rule); a
        warning says so where a strength rounds to no step, or, on a sampler
        of under 20 steps, down to a lower strength's steps. With
        labels (and guidance), it is a class-guided edit: "turn this 3 into
        an 8".

        Args:
            images: float array `(n, H, W, C)` in [-1, 1], the model's image
                shape.
            strength: float in [0, 1]: 0 returns the images, 1 is `generate`
                (pure noise, the images unused).
            labels, guidance_scale, sampler, seed, batch_size, use_ema,
                verbose, prompts, negative_prompts, control, control_scale:
                as `generate`.

        Returns:
            NumPy float32 `(n, H, W, C)` in [-1, 1].
        """
        sampler = self.sampler_for(sampler)
        images = check_images(self, images)
        strength = check_float("strength", strength, 0.0, 1.0)
        steps = sampler.steps(self.schedule)
        kept = int(steps * strength)
        warn_if_rounded(strength, steps)
        if 0 < kept < steps and not sampler.starts_part_way:
            raise ValueError(
                f"{type(sampler).__name__} cannot start from a noised image: "
                "use another sampler for img2img, or strength 0 or 1. "
                f"Received: sampler={sampler!r}, strength={strength}"
            )
        run = _edit_run(
            self,
            sampler,
            (labels, prompts, negative_prompts),
            guidance_scale,
            seed,
            batch_size,
            use_ema,
            control=(control, control_scale),
        )
        if kept == 0:  # checks the other arguments, then draws nothing
            validation.check_generate_args(
                self,
                len(images),
                sampler,
                run.condition,
                guidance_scale,
                batch_size,
                seed,
            )
            run.checked_control(self, len(images))
            sampler.validate(self.schedule)
            return images.copy()
        if kept == steps:
            return self.sample_run(run, len(images), verbose)
        latents, _ = self._edit_inputs(images, None)
        edit = ("img2img", steps - kept)
        return self.sample_run(run, len(images), verbose, True, edit, (latents,))

    def _edit_inputs(self, images, keep):
        """The images (and keep mask) on the model's grid: latents of a
        latent model, whose mask keeps a cell only where its block is kept."""
        if self.autoencoder is None:
            return images, keep
        latents = ops.convert_to_numpy(self.autoencoder.encode_mean(images))
        if keep is not None:
            n, h, w, _ = latents.shape
            blocks = keep.min(axis=-1).reshape(n, h, keep.shape[1] // h, w, -1)
            keep = blocks.min(axis=(2, 4))[..., None]
        return latents.astype(np.float32), keep


def _edit_run(model, sampler, given, *sampling, control=(None, 1.0)):
    """An edit's `SamplingRun`: its condition picked from `given`, `(labels,
    prompts, negative_prompts)`; `sampling` is `(guidance_scale, seed,
    batch_size, use_ema)`; `control` the control images and their scale."""
    condition = validation.pick_condition(model, *given)
    return SamplingRun(sampler, condition, *sampling, given[2], control)
