"""Argument and data checks of DiffusionModel, raised before any state changes."""

import keras
import numpy as np
import tensorflow as tf

from keras_diffusion.conditioning import (
    ClassLabels,
    FrozenTextConditioning,
    TextConditioning,
)
from keras_diffusion.conditioning.labels import NO_NULL_CLASS
from keras_diffusion.schedules.noise_schedule import NoiseSchedule
from keras_diffusion.schedules.process import Process
from keras_diffusion.utils.checks import (
    check_bool,
    check_float,
    check_int,
    check_seed,
)

# The loss weightings of a VP objective, for the run's checks; "none" is
# plain MSE.
LOSS_WEIGHTINGS = NoiseSchedule.loss_weightings
_RANGE_TOLERANCE = 1e-3


def check_constructor_args(
    denoiser,
    schedule,
    ema_decay,
    class_dropout,
    ema_warmup=True,
):
    check_bool("ema_warmup", ema_warmup)
    if not isinstance(denoiser, keras.Model):
        raise TypeError(
            "Argument `denoiser` must be a keras.Model called as "
            f"denoiser([x_t, t]). Received: denoiser={denoiser!r}"
        )
    if schedule is not None and not isinstance(schedule, Process):
        raise TypeError(
            "Argument `schedule` must be a process: a keras_diffusion."
            "NoiseSchedule, EDMSchedule, FlowMatchSchedule or a subclass of "
            "keras_diffusion.schedules.Process. "
            f"Received: schedule={schedule!r}"
        )
    if ema_decay is not None:
        check_float("ema_decay", ema_decay, 0.0, less_than=1.0)
    check_float("class_dropout", class_dropout, 0.0, less_than=1.0)


def _num_inputs(denoiser):
    inputs = getattr(denoiser, "inputs", None)
    return len(inputs) if inputs else None


def resolve_image_shape(denoiser, image_shape):
    """The (H, W, C) the denoiser takes: its static input shape, or the
    `image_shape` given, which must agree with it."""
    inputs = getattr(denoiser, "inputs", None)
    static = tuple(inputs[0].shape[1:]) if inputs else None
    if image_shape is not None:
        try:
            image_shape = tuple(int(d) for d in image_shape)
        except (TypeError, ValueError) as error:
            raise ValueError(
                "Argument `image_shape` must be (height, width, channels). "
                f"Received: image_shape={image_shape!r}"
            ) from error
        if len(image_shape) != 3 or min(image_shape) < 1:
            raise ValueError(
                "Argument `image_shape` must be (height, width, channels). "
                f"Received: image_shape={image_shape}"
            )
        if static is not None and None not in static and static != image_shape:
            raise ValueError(
                f"Argument `image_shape` {image_shape} does not match the "
                f"denoiser's input shape {static}."
            )
    elif static is not None and None not in static:
        image_shape = tuple(int(d) for d in static)
    else:
        raise ValueError(
            "The denoiser has no static image shape: pass "
            "`image_shape=(height, width, channels)`. Received: image_shape=None"
        )
    return image_shape


def has_null_class(denoiser):
    """Whether label `num_classes` is a null class (a denoiser of one's own
    is taken at its word: it has one unless it says `null_class=False`)."""
    return getattr(denoiser, "null_class", True) is not False


def resolve_conditioning(denoiser, conditioning, num_classes, class_dropout):
    """The model's condition: `conditioning` as given (text), `ClassLabels`
    of `num_classes`, or `None` (unconditional); checked against the
    denoiser's inputs."""
    if conditioning is None:
        check_conditioning(denoiser, num_classes, class_dropout)
        if num_classes is None:
            return None
        return ClassLabels(num_classes, class_dropout, has_null_class(denoiser))
    if not isinstance(conditioning, (TextConditioning, FrozenTextConditioning)):
        raise TypeError(
            "Argument `conditioning` must be a keras_diffusion.TextConditioning "
            "or FrozenTextConditioning (class labels: `num_classes`). "
            f"Received: conditioning={conditioning!r}"
        )
    if num_classes is not None or class_dropout:
        what = "num_classes" if num_classes is not None else "class_dropout"
        value = num_classes if num_classes is not None else class_dropout
        raise ValueError(
            f"Argument `{what}` is for class labels; a text model drops "
            "captions with `TextConditioning(dropout=...)`. "
            f"Received: {what}={value!r}, conditioning={conditioning!r}"
        )
    if _num_inputs(denoiser) == 2:
        raise ValueError(
            "The denoiser takes [x_t, t] (no condition) but `conditioning` was "
            f"given. Received: conditioning={conditioning!r}"
        )
    inputs = getattr(denoiser, "inputs", None)
    context = (conditioning.sequence_length, conditioning.width)
    given = tuple(inputs[2].shape[1:]) if inputs and len(inputs) == 3 else None
    # A dimension the denoiser leaves open (`None`: any number of tokens)
    # takes the encoder's.
    if given is not None and (
        len(given) != 2
        or any(g not in (None, c) for g, c in zip(given, context, strict=True))
    ):
        raise ValueError(
            f"The denoiser's context input has shape {given}, the text "
            "encoder gives "
            f"(sequence_length, width) = {context}. Received: "
            f"conditioning={type(conditioning).__name__}(sequence_length="
            f"{context[0]}, width={context[1]})"
        )
    return conditioning


def _refuse_context(denoiser, num_classes):
    """A denoiser whose third input is a text encoder's context `(batch, L,
    D)` (a `UNet` with `cross_attention_dim`) needs a text conditioning."""
    inputs = getattr(denoiser, "inputs", None) or ()
    context = len(inputs) == 3 and len(inputs[2].shape) == 3
    if context or getattr(denoiser, "cross_attention_dim", None) is not None:
        raise ValueError(
            "The denoiser takes [x_t, t, context], a text encoder's embeddings "
            "(batch, tokens, width): pass `conditioning=keras_diffusion."
            "TextConditioning(...)` (adapted on the training captions) or a "
            "FrozenTextConditioning, not `num_classes`. Received: "
            "conditioning=None, "
            f"num_classes={num_classes!r}"
        )


def check_conditioning(denoiser, num_classes, class_dropout):
    count = _num_inputs(denoiser)
    _refuse_context(denoiser, num_classes)
    if num_classes is not None:
        check_int("num_classes", num_classes, 1)
        own = getattr(denoiser, "num_classes", None)
        if own is not None and own != num_classes:
            raise ValueError(
                f"Argument `num_classes` must match the denoiser's num_classes="
                f"{own}. Received: num_classes={num_classes}"
            )
        if count == 2:
            raise ValueError(
                "The denoiser takes [x_t, t] (no labels) but `num_classes` was "
                f"given. Received: num_classes={num_classes}"
            )
        if class_dropout and not has_null_class(denoiser):
            raise ValueError(
                f"Argument `class_dropout` needs {NO_NULL_CLASS}. "
                f"Received: class_dropout={class_dropout}"
            )
    elif count == 3:
        raise ValueError(
            "The denoiser takes [x_t, t, labels]: pass `num_classes`. "
            "Received: num_classes=None"
        )
    elif class_dropout:
        raise ValueError(
            "Argument `class_dropout` needs a class-conditional denoiser. "
            f"Received: class_dropout={class_dropout}, num_classes=None"
        )


def check_autoencoder(autoencoder, image_shape):
    """An autoencoder's latents must be the denoiser's input."""
    if autoencoder is None:
        return
    if not all(
        hasattr(autoencoder, name)
        for name in ("latent_shape", "sample_latents", "decode")
    ):
        raise TypeError(
            "Argument `autoencoder` must be a latent autoencoder such as "
            "keras_diffusion.latent.StableDiffusionAutoencoder. "
            f"Received: autoencoder={autoencoder!r}"
        )
    latent_shape = tuple(autoencoder.latent_shape)
    if latent_shape != tuple(image_shape):
        raise ValueError(
            f"The denoiser's input shape {tuple(image_shape)} must be the "
            f"autoencoder's latent shape {latent_shape}. "
            f"Received: autoencoder={autoencoder!r}"
        )


def split_batch(data, conditional):
    """`images` or `(images, labels)` -> (images, labels or None)."""
    if isinstance(data, dict):
        raise TypeError(
            "Batches must be images or (images, labels) tuples. Received a dict "
            f"with keys {sorted(data)}"
        )
    if isinstance(data, (tuple, list)):
        data = tuple(d for d in data if d is not None)
        if len(data) == 1:
            data = data[0]
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(
                "Batches must be images or (images, labels). Received a tuple "
                f"of {len(data)} elements"
            )
        images, labels = data
        if not conditional:
            raise ValueError(
                "Labels were given but the model is unconditional (no "
                "`num_classes`). Received: labels of shape "
                f"{tuple(labels.shape)}"
            )
        return images, labels
    if conditional:
        raise ValueError(
            "The model is class-conditional: batches must be (images, labels). "
            f"Received: images only, of shape {tuple(data.shape)}"
        )
    return data, None


def check_image_spec(images, image_shape, latent=False):
    if latent:
        return _check_latent_spec(images, image_shape)
    dtype = tf.as_dtype(images.dtype)
    if not dtype.is_floating:
        raise TypeError(
            "Images must be floats scaled to [-1, 1] (e.g. "
            "`images / 127.5 - 1`, or the pipelines in keras_diffusion.data). "
            f"Received: images of dtype {dtype.name}"
        )
    shape = tuple(images.shape)
    if len(shape) != 4 or any(
        d is not None and d != e for d, e in zip(shape[1:], image_shape, strict=False)
    ):
        raise ValueError(
            f"Images must have shape (batch, {', '.join(map(str, image_shape))}) "
            f"to match the denoiser. Received: images of shape {shape}"
        )


def _check_latent_spec(latents, latent_shape):
    """Latents `(batch, h, w, c)`, or posterior moments `(batch, h, w, 2c)`."""
    dtype = tf.as_dtype(latents.dtype)
    height, width, channels = latent_shape
    shape = tuple(latents.shape)
    if (
        not dtype.is_floating
        or len(shape) != 4
        or shape[1] not in (None, height)
        or shape[2] not in (None, width)
        or shape[3] not in (channels, 2 * channels)
    ):
        raise ValueError(
            f"With an autoencoder, batches must be float latents (batch, {height}, "
            f"{width}, {channels}) or moments (batch, {height}, {width}, "
            f"{2 * channels}) from keras_diffusion.latent.encode_dataset. "
            f"Received: a batch of shape {shape} and dtype {dtype.name}"
        )


def check_array_images(images, image_shape, latent=False):
    """An array of images: the model's shape, floats in [-1, 1] (latents:
    any range), at least one."""
    check_image_spec(images, image_shape, latent)
    if images.size:
        low, high = float(np.min(images)), float(np.max(images))
        if not latent and (low < -1 - _RANGE_TOLERANCE or high > 1 + _RANGE_TOLERANCE):
            raise ValueError(
                "Images must be scaled to [-1, 1]. Received: values in "
                f"[{low:.4g}, {high:.4g}]"
            )
    else:
        raise ValueError("Received: an empty array of images (0 examples)")


def _check_array_data(images, labels, image_shape, num_classes, latent=False):
    check_array_images(images, image_shape, latent)
    if labels is not None and num_classes is not None:
        labels = np.asarray(labels)
        if labels.dtype == bool or not np.issubdtype(labels.dtype, np.integer):
            raise TypeError(
                "Labels must be integer class ids. Received: labels of dtype "
                f"{labels.dtype}"
            )
        if labels.shape != (images.shape[0],):
            raise ValueError(
                f"Labels must have shape ({images.shape[0]},). Received: "
                f"labels of shape {labels.shape}"
            )
        if labels.min() < 0 or labels.max() >= num_classes:
            raise ValueError(
                f"Labels must lie in [0, {num_classes}). Received: labels in "
                f"[{labels.min()}, {labels.max()}]"
            )


def check_fit_data(x, y, image_shape, num_classes, latent=False):
    """Checks what can be checked cheaply on the host before `fit` starts.

    With `latent`, the data are latents or moments: no [-1, 1] range check.
    """
    if tf.is_tensor(x) and tf.executing_eagerly():
        x = np.asarray(x)
        y = None if y is None else np.asarray(y)
    if isinstance(x, np.ndarray):
        if y is not None and num_classes is None:
            split_batch((x, y), conditional=False)
        if y is None and num_classes is not None:
            split_batch(x, conditional=True)
        _check_array_data(x, y, image_shape, num_classes, latent)
    elif isinstance(x, tf.data.Dataset):
        if int(x.cardinality()) == 0:
            raise ValueError("Received: an empty tf.data.Dataset (0 batches)")
        spec = x.element_spec
        images, _ = split_batch(spec, num_classes is not None)
        check_image_spec(images, image_shape, latent)
    elif isinstance(x, keras.utils.PyDataset):
        if x.num_batches == 0:  # None means unknown length, which is fine.
            raise ValueError("Received: an empty PyDataset (0 batches)")
        first = x[0]
        images, labels = split_batch(first, num_classes is not None)
        _check_array_data(np.asarray(images), labels, image_shape, num_classes, latent)


def check_generate_args(
    model, num_images, sampler, labels, guidance_scale, batch_size, seed=None
):
    """Validates `generate` arguments; returns `(condition, guided,
    batch_size)`, the condition checked by the model's conditioning (labels,
    or a text model's tokens; `None` where `prepare` fills it)."""
    check_seed(seed)
    check_int("num_images", num_images, minimum=1)
    if not hasattr(sampler, "sample"):
        raise TypeError(
            "Argument `sampler` must be a keras_diffusion sampler. "
            f"Received: sampler={sampler!r}"
        )
    check_float("guidance_scale", guidance_scale)
    if batch_size is None:
        batch_size = min(int(num_images), 256)
    else:
        batch_size = check_int("batch_size", batch_size, 1)
    if not model.conditional:
        if labels is not None:
            raise ValueError(
                "The model is unconditional: `labels` must be None. "
                f"Received: labels={labels!r}"
            )
        if guidance_scale != 1.0:
            raise ValueError(
                "Classifier-free guidance needs a class-conditional model. "
                f"Received: guidance_scale={guidance_scale}"
            )
        return None, False, batch_size
    condition, guided = model.conditioning.check(labels, num_images, guidance_scale)
    return condition, guided, int(batch_size)


def pick_condition(model, labels, prompts, negative_prompts):
    """`generate`'s condition of the model's kind: its `labels`, or its
    `prompts` for a text model; the other kind's argument is refused."""
    text = model.conditional and model.conditioning.argument == "prompts"
    if text and labels is not None:
        raise ValueError(
            "The model is text-conditional: pass `prompts` (str), not `labels`. "
            f"Received: labels={labels!r}"
        )
    if not text:
        kind = "class-conditional" if model.conditional else "unconditional"
        for name, value in (
            ("prompts", prompts),
            ("negative_prompts", negative_prompts),
        ):
            if value is not None:
                raise ValueError(
                    f"Argument `{name}` needs a text model (conditioning="
                    f"TextConditioning(...)); this model is {kind}. "
                    f"Received: {name}={value!r}"
                )
    return prompts if text else labels
