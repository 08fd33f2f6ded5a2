"""A `DiffusionModel` steered by a ControlNet: its checks, its data and its
calls.

The model's denoiser (a `keras_diffusion.UNet`) and its condition are
frozen; its `controlnet` trains and is averaged (EMA, post-hoc EMA). Every
call of the denoiser goes through `controlled_call`: the ControlNet's
residuals on the control images, added to the U-Net's skips and middle
output (`controlnet.UNetViews`), times a scale.
"""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning import control as control_lib
from keras_diffusion.models import validation
from keras_diffusion.models.controlnet import ControlNet, UNetViews
from keras_diffusion.models.unet_args import ARGUMENTS
from keras_diffusion.utils.checks import check_float

# The key of the control images in a batch's `y` beside the labels.
CONTROL = "control"
_FORMS = (
    "(images, controls), or (images, {'labels': labels, 'control': controls}) "
    "for a class-conditional model"
)


class ControlState:
    """What a controlled model keeps beside its layers (not saved: views of
    the denoiser's own layers).

    Attributes:
        views: the `UNetViews` of the denoiser.
    """

    def __init__(self, denoiser):
        self.views = UNetViews(denoiser)


def check_controlnet(controlnet, denoiser, schedule, conditioning, others):
    """Raises unless `controlnet` can steer `denoiser` in a model of
    `schedule`, `conditioning` and `others` (its `lora` and `autoencoder`),
    all before anything is built."""
    lora, autoencoder = others
    if not isinstance(controlnet, ControlNet):
        raise TypeError(
            "Argument `controlnet` must be a keras_diffusion.ControlNet "
            f"(ControlNet.from_unet(unet)). Received: controlnet={controlnet!r}"
        )
    UNetViews(denoiser)  # refuses a denoiser whose blocks it cannot find
    own = denoiser.get_config()
    for name in ARGUMENTS:
        # An argument added since the ControlNet was saved: the U-Net's default.
        given = controlnet.unet_config.get(name, own[name])
        ours, theirs = _comparable(own[name]), _comparable(given)
        if ours != theirs:
            raise ValueError(
                f"The ControlNet was made for another U-Net: its {name} is "
                f"{theirs!r}, the denoiser's {ours!r} (ControlNet.from_unet("
                f"denoiser) fits it). Received: controlnet={controlnet.name!r}"
            )
    if schedule.guidance_input:
        raise ValueError(
            "A ControlNet needs the two branches of guidance, and this "
            "process takes the guidance scale as an input (train the base "
            "with `guidance_max=1`, --guidance-max 1). Received: "
            f"schedule={schedule!r}"
        )
    if lora is not None:
        raise ValueError(
            f"A model has LoRA or a ControlNet, not both. Received: lora={lora!r}"
        )
    if autoencoder is not None:
        raise ValueError(
            "A ControlNet on a latent model is not supported yet. Received: "
            f"autoencoder={type(autoencoder).__name__}"
        )
    if conditioning is not None and conditioning.tokenizes and not controlnet.extractor:
        raise ValueError(
            "A ControlNet of a text model makes its controls of the images "
            "(ControlNet(extractor='silhouette' or 'edges')): controls given "
            "beside the captions are not supported yet. Received: "
            f"controlnet={controlnet.name!r} without an extractor"
        )


def freeze(denoiser):
    """Freezes every weight of `denoiser`: a model built with
    `trainable=False` (a saved file's) leaves its layers trainable, and
    setting its own flag again does not reach them."""
    denoiser.trainable = False
    for layer in denoiser.layers:
        layer.trainable = False


def _comparable(value):
    return tuple(_comparable(v) for v in value) if isinstance(value, list) else value


def unpack(model, data):
    """A controlled model's batch -> `(images, labels or None, controls)`:
    the controls the batch gives, or those its ControlNet's extractor makes
    of the images (the batch then as the base model's)."""
    extractor = model.controlnet.extractor
    if extractor is not None:
        images, labels = validation.split_batch(data, model.conditional)
        return images, labels, control_lib.extract(extractor, images)
    images, y = validation.split_batch(data, conditional=True)
    labels, control = split_control(y, model.conditional)
    if (
        keras.backend.standardize_dtype(control.dtype) == "uint8"
    ):  # as `generate` takes them: 255 is 1
        control = ops.cast(control, "float32") / 255.0
    return images, labels, control


def split_control(y, conditional):
    """A controlled model's batch `y` -> `(labels or None, controls)`."""
    if isinstance(y, dict):
        extra = sorted(set(y) - {CONTROL, "labels"})
        if CONTROL not in y or extra or ("labels" in y) != conditional:
            raise ValueError(
                f"The model has a ControlNet: batches must be {_FORMS}. "
                f"Received: a dict with keys {sorted(y)}"
            )
        return y.get("labels"), y[CONTROL]
    if conditional or y is None:
        received = "images only" if y is None else "(images, one tensor)"
        raise ValueError(
            f"The model has a ControlNet: batches must be {_FORMS}. "
            f"Received: {received}"
        )
    return None, y


def check_control_spec(control, shape):
    """Raises unless a control batch (a tensor or spec) has `shape` a row."""
    received = tuple(control.shape[1:])
    if len(received) != len(shape) or any(
        r is not None and r != s for r, s in zip(received, shape, strict=True)
    ):
        raise ValueError(
            f"The ControlNet takes control images of shape {shape} (height, "
            f"width, channels). Received: control images of shape "
            f"{tuple(control.shape)}"
        )


def check_control_images(control, shape, num_images, argument="control"):
    """`generate`'s control images as float32 `(num_images, *shape)` in
    [0, 1]: uint8 images are divided by 255; one image serves every image."""
    if control is None:
        raise ValueError(
            f"The model has a ControlNet: `{argument}` must give the control "
            f"images, of shape (num_images, {', '.join(map(str, shape))}) "
            "(scripts/sample.py: --control-images DIR; the evaluation tools "
            f"do not sample such a model yet). Received: {argument}=None"
        )
    array = np.asarray(control)
    if array.ndim == len(shape):
        array = array[None]
    if array.dtype == np.uint8:
        array = array.astype(np.float32) / 255.0
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(
            f"Argument `{argument}` must be float images in [0, 1] or uint8. "
            f"Received: {argument} of dtype {array.dtype}"
        )
    check_control_spec(array, shape)
    if len(array) == 1:
        array = np.repeat(array, num_images, axis=0)
    if len(array) != num_images:
        raise ValueError(
            f"Argument `{argument}` must hold one image or num_images="
            f"{num_images}. Received: {argument} of shape {array.shape}"
        )
    if array.min() < 0.0 or array.max() > 1.0:
        raise ValueError(
            f"Argument `{argument}` must lie in [0, 1] (as diffusers' control "
            f"images). Received: values in [{array.min():.3g}, {array.max():.3g}]"
        )
    return array.astype(np.float32)


def check_control_scale(control_scale):
    return check_float("control_scale", control_scale, minimum=0.0)


def check_control_fit_data(model, x, y):
    """`fit`'s data of a controlled model, checked on the host before it
    starts: the images (and labels) as any model's, the controls' shape
    (and their range, given as arrays)."""
    shape = model.controlnet.control_shape
    latent = model.autoencoder is not None
    if model.controlnet.extractor is not None:  # the base model's data
        return validation.check_fit_data(
            x, y, model.image_shape, model.num_classes, latent
        )
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)):
        first = x.element_spec if isinstance(x, tf.data.Dataset) else x[0]
        if not isinstance(first, (tuple, list)) or len(first) != 2:
            split_control(None, model.conditional)  # refuses, naming the forms
        images, y = validation.split_batch(first, conditional=True)
        validation.check_image_spec(images, model.image_shape, latent)
        check_control_spec(split_control(y, model.conditional)[1], shape)
        return
    labels, control = split_control(y, model.conditional)
    validation.check_fit_data(x, labels, model.image_shape, model.num_classes, latent)
    if isinstance(control, np.ndarray) or tf.is_tensor(control):
        check_control_images(control, shape, len(control), argument="y")


def controlled_call(model, inputs, control, scale, training, values=None):
    """The frozen denoiser's output on `inputs` with the ControlNet's
    residuals on `control` added times `scale`; `values` are the
    ControlNet's trainable weights to call it with (its EMA's)."""
    controlnet = model.controlnet
    control = ops.cast(control, "float32")
    if values is None:
        residuals = controlnet([*inputs, control], training=training)
    else:
        non_trainable = [v.value for v in controlnet.non_trainable_variables]
        residuals, _ = controlnet.stateless_call(
            values, non_trainable, [*inputs, control], training=False
        )
    return model.control_state.views(inputs, residuals, scale)


def enable_controlnet(
    model,
    conditioning_channels=None,
    conditioning_embedding_channels=(16,),
    use_ema=True,
    extractor=None,
):
    """A copy of a trained `model` that trains a ControlNet of its U-Net and
    nothing else.

    The copy's frozen U-Net holds `model`'s EMA weights when `use_ema` and
    it keeps an EMA (the weights it samples with), else its live ones; its
    ControlNet starts from the same weights, its zero convolutions at zero:
    until it trains, the copy generates `model`'s images bit for bit,
    whatever the control.

    Args:
        model: a `DiffusionModel` whose denoiser is a `keras_diffusion.UNet`.
        conditioning_channels: optional int, the control images' channels.
            Defaults to `None`: 1 with an `extractor`, else 3.
        conditioning_embedding_channels: tuple of ints, the control
            encoder's widths (`ControlNet`). Defaults to `(16,)`.
        use_ema: bool, take `model`'s EMA weights. Defaults to `True`.
        extractor: optional, the ControlNet's `extractor` (`"silhouette"`,
            `"edges"`): `fit` then makes each image's control. Defaults to
            `None`.

    Returns:
        A new `DiffusionModel` with `controlnet` set, not compiled.
    """
    if not all(hasattr(model, name) for name in ("denoiser", "controlnet", "ema")):
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={type(model).__name__}"
        )
    if model.controlnet is not None:
        raise ValueError(
            f"The model has a ControlNet already ({model.controlnet.name!r})."
        )
    base = model.denoiser
    UNetViews(base)  # refuses a denoiser whose blocks it cannot find
    config = model.get_config()  # its post-hoc profiles average the ControlNet
    config["controlnet"] = ControlNet(  # from_config takes it as built
        base.get_config(),
        conditioning_channels,
        conditioning_embedding_channels,
        extractor,
    )
    copy = type(model).from_config(config)
    averaged = {}
    if use_ema and model.ema is not None:
        variables = model.averaged_variables
        averaged = {
            id(v): x for v, x in zip(variables, model.ema.values(), strict=True)
        }
    for target, source in zip(copy.denoiser.weights, base.weights, strict=True):
        target.assign(averaged.get(id(source), source))
    own = getattr(model.conditioning, "weights", None) or []
    for target, source in zip(
        getattr(copy.conditioning, "weights", []), own, strict=True
    ):
        target.assign(averaged.get(id(source), source))
    copy.controlnet.copy_weights(copy.denoiser)
    for average in (copy.ema, copy.power_ema):
        if average is not None:
            average.reset(copy.averaged_variables)
    return copy
