"""ControlNet (Zhang et al., 2023): spatial control of a trained U-Net.

A trainable copy of the U-Net's encoder (its time embedding, label or
context embedding, input convolution, down blocks and middle block),
initialised from the U-Net's weights, sees the noisy image and a control
image (an edge map, a silhouette), embedded by a small convolutional encoder
whose last convolution starts at zero. One zero-initialised 1x1 convolution a
skip connection, and one for the middle block, turn the copy's features into
residuals that are added to the frozen U-Net's skips and middle output, times
a `control_scale`. At initialisation every residual is zero, so the
controlled U-Net is the U-Net bit for bit; training moves the copy only.

The U-Net is split where the residuals enter by `unet_views`: Keras views of
its own layers (no copy), found by the names `keras_diffusion.UNet` gives
them, the same as diffusers' module tree.
"""

import keras
from keras import layers, ops

from keras_diffusion.conditioning import control as control_lib
from keras_diffusion.models.unet import UNet, dtype_policy_scope
from keras_diffusion.utils.checks import check_int

_SKIP = "_concat_"  # the up path's concatenations: `up_{level}_concat_{i}`


def _skip_concatenations(unet):
    """The up path's concatenations, in the up path's order: the first takes
    the middle block's output and the deepest skip, the last the stem's."""
    return [layer for layer in unet.layers if _SKIP in layer.name]


def check_controllable(denoiser, argument="denoiser"):
    """Raises unless `denoiser` is a `keras_diffusion.UNet` that a ControlNet
    can copy: its blocks named as the U-Net names them, a middle block."""
    if not isinstance(denoiser, UNet):
        raise TypeError(
            f"A ControlNet copies the blocks of a keras_diffusion.UNet by their "
            f"names; `{argument}` is a {type(denoiser).__name__} "
            f"({getattr(denoiser, 'name', '?')!r}), whose blocks it cannot find. "
            f"Received: {argument}={denoiser!r}"
        )
    if not denoiser.mid_block:
        raise ValueError(
            "A ControlNet adds a residual to the U-Net's middle block, which "
            f"this U-Net has none of (mid_block=False). Received: {argument}="
            f"{denoiser.name!r}"
        )


class UNetViews:
    """A U-Net cut where a ControlNet's residuals enter, sharing its layers.

    Attributes:
        down: Keras model `inputs -> [mid, emb, *skips]`: the middle block's
            output, the time (and condition) embedding, and the skips in the
            down path's order (the stem's first).
        up: Keras model `[mid, emb, *context, *skips] -> prediction`.
        context: bool, whether the U-Net takes a context (cross-attention).
    """

    def __init__(self, unet):
        check_controllable(unet)
        concats = _skip_concatenations(unet)
        skips = [layer.input[1] for layer in reversed(concats)]
        mid = concats[0].input[0]
        emb = unet.get_layer("mid_res_0").input[1]
        self.context = unet.cross_attention_dim is not None
        context = [unet.inputs[2]] if self.context else []
        self.down = keras.Model(unet.inputs, [mid, emb, *skips], name="unet_down")
        self.up = keras.Model([mid, emb, *context, *skips], unet.output, name="unet_up")

    def __call__(self, inputs, residuals, scale):
        """The U-Net's prediction on `inputs` with `residuals` (the
        ControlNet's: one a skip in the down order, then the middle's) added
        times `scale`."""
        inputs = [ops.convert_to_tensor(x) for x in inputs]
        mid, emb, *skips = self.down(inputs, training=False)
        *skip_residuals, mid_residual = residuals
        skips = [_add(s, r, scale) for s, r in zip(skips, skip_residuals, strict=True)]
        context = [inputs[2]] if self.context else []
        up_inputs = [_add(mid, mid_residual, scale), emb, *context, *skips]
        return self.up(up_inputs, training=False)


def _add(features, residual, scale):
    """`features + scale * residual`, in the features' dtype (mixed
    precision): `features` itself, bit for bit, where the residual is 0."""
    dtype = features.dtype
    return features + ops.cast(scale, dtype) * ops.cast(residual, dtype)


def _control_encoder(control, channels, width):
    """diffusers' `ControlNetConditioningEmbedding`: a 3x3 convolution, then
    a 3x3 and a strided 3x3 convolution a step of `channels`, swish between,
    and a zero-initialised 3x3 convolution to the stem's `width`."""
    h = layers.Conv2D(channels[0], 3, padding="same", name="control_conv_in")(control)
    h = layers.Activation("silu", name="control_act_in")(h)
    for i, (c_in, c_out) in enumerate(zip(channels[:-1], channels[1:], strict=True)):
        h = layers.Conv2D(c_in, 3, padding="same", name=f"control_block_{2 * i}")(h)
        h = layers.Activation("silu", name=f"control_act_{2 * i}")(h)
        h = layers.ZeroPadding2D(1, name=f"control_pad_{i}")(h)
        h = layers.Conv2D(c_out, 3, strides=2, name=f"control_block_{2 * i + 1}")(h)
        h = layers.Activation("silu", name=f"control_act_{2 * i + 1}")(h)
    return layers.Conv2D(
        width, 3, padding="same", kernel_initializer="zeros", name="control_conv_out"
    )(h)


def _zero_conv(h, name):
    return layers.Conv2D(h.shape[-1], 1, kernel_initializer="zeros", name=name)(h)


@keras.saving.register_keras_serializable(package="keras_diffusion")
class ControlNet(keras.Model):
    """The trainable copy of a U-Net's encoder that steers it by a control
    image (Zhang et al., 2023; diffusers' `ControlNetModel`).

    Called as `controlnet([x_t, t, control])` (`[x_t, t, labels, control]`,
    `[x_t, t, context, control]` for a conditioned U-Net), it returns the
    residuals of the U-Net's skips, in the down path's order (the input
    convolution's first), then the middle block's: zero until it trains.
    `DiffusionModel(unet, controlnet=...)` (or `enable_controlnet`) adds them
    to the frozen U-Net's.

    Build it from a U-Net with `ControlNet.from_unet(unet)`, which copies the
    U-Net's weights into the copy; `ControlNet(unet_config)` builds the same
    network with fresh weights (what a saved file rebuilds).

    Args:
        unet_config: dict, the `keras_diffusion.UNet`'s `get_config()`.
        conditioning_channels: optional int >= 1, the control image's
            channels (1 for a silhouette or an edge map, 3 for an RGB
            control). Defaults to `None`: 1 with an `extractor`, else 3.
        conditioning_embedding_channels: tuple of ints, the control
            encoder's widths; each step after the first halves the
            resolution, so that a control image is
            `2 ** (len(conditioning_embedding_channels) - 1)` times the
            U-Net's input (8x for an SD latent model's `(16, 32, 96, 256)`,
            diffusers' default). Defaults to `(16,)`: the control at the
            image's own size.
        extractor: optional name of the extractor that makes each training
            image's control in the train step (`"silhouette"`, `"edges"`;
            or a dict of its name and options, see
            `keras_diffusion.conditioning.control`): `fit` then takes the
            base model's data as they are. Its control has 1 channel.
            Defaults to `None`: `fit` takes the controls.

    Reference:
        - [Zhang et al., 2023](https://arxiv.org/abs/2302.05543)
    """

    def __init__(
        self,
        unet_config,
        conditioning_channels=None,
        conditioning_embedding_channels=(16,),
        extractor=None,
        **kwargs,
    ):
        extractor = control_lib.check_extractor(extractor)
        if conditioning_channels is None:
            conditioning_channels = 1 if extractor is not None else 3
        conditioning_channels = check_int(
            "conditioning_channels", conditioning_channels, minimum=1
        )
        if extractor is not None and conditioning_channels != 1:
            raise ValueError(
                f"The {extractor['name']} extractor makes a control of 1 "
                "channel. Received: conditioning_channels="
                f"{conditioning_channels}"
            )
        channels = _check_channels(conditioning_embedding_channels)
        if not isinstance(unet_config, dict):
            raise TypeError(
                "Argument `unet_config` must be a keras_diffusion.UNet's "
                f"get_config(). Received: unet_config={unet_config!r}"
            )
        unet_config = dict(unet_config)
        copy = UNet.from_config({**unet_config, "name": "unet_copy"})
        check_controllable(copy, "unet_config")
        policy = copy.dtype_policy
        with dtype_policy_scope(policy):
            inputs, outputs = _build(copy, conditioning_channels, channels)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.dtype_policy = policy
        self.unet_config = unet_config
        self.conditioning_channels = conditioning_channels
        self.conditioning_embedding_channels = channels
        self.extractor = extractor

    def extract(self, images):
        """The controls of `images` (float `(n, H, W, C)` in [-1, 1]) by the
        ControlNet's `extractor`: NumPy float32 `(n, H, W, 1)` in {0, 1}."""
        if self.extractor is None:
            raise ValueError(
                "This ControlNet has no extractor (ControlNet(extractor=...)); "
                "its controls are given."
            )
        return ops.convert_to_numpy(control_lib.extract(self.extractor, images))

    @classmethod
    def from_unet(cls, unet, **kwargs):
        """A ControlNet of `unet`, its copy holding `unet`'s weights.

        Args:
            unet: a `keras_diffusion.UNet` (with a middle block).
            **kwargs: `ControlNet`'s other arguments.
        """
        check_controllable(unet, "unet")
        controlnet = cls(unet.get_config(), **kwargs)
        controlnet.copy_weights(unet)
        return controlnet

    def copy_weights(self, unet):
        """Sets the copy's weights to `unet`'s, layer by layer by name."""
        for part in ("unet_embedding", "unet_encoder"):
            for layer in self.get_layer(part).layers:
                if layer.weights:  # not the views' input layers
                    _assign(layer, unet.get_layer(layer.name))
        _assign(self.get_layer("stem"), unet.get_layer("stem"))

    @property
    def control_shape(self):
        """The control image's shape `(H, W, C)`."""
        return tuple(int(d) for d in self.inputs[-1].shape[1:])

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "unet_config": self.unet_config,
            "conditioning_channels": self.conditioning_channels,
            "conditioning_embedding_channels": self.conditioning_embedding_channels,
        }
        if self.extractor is not None:
            config["extractor"] = dict(self.extractor)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _check_channels(channels):
    if isinstance(channels, (str, bytes)) or not hasattr(channels, "__iter__"):
        channels = (channels,)
    channels = tuple(channels)
    if not channels or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in channels
    ):
        raise ValueError(
            "Argument `conditioning_embedding_channels` must be a non-empty "
            "tuple of ints >= 1. Received: conditioning_embedding_channels="
            f"{channels!r}"
        )
    return channels


def _build(copy, conditioning_channels, channels):
    """The ControlNet's graph on the layers of `copy` (a fresh U-Net of the
    base's config): `(inputs, residuals)`."""
    concats = _skip_concatenations(copy)
    stem = copy.get_layer("stem")
    skips = [layer.input[1] for layer in reversed(concats)]
    emb = copy.get_layer("mid_res_0").input[1]
    conditions = copy.inputs[1:]  # t, and the labels or the context
    embedding = keras.Model(conditions, emb, name="unet_embedding")
    encoder = keras.Model(
        [stem.output, emb, *conditions[1:]]
        if copy.cross_attention_dim
        else [stem.output, emb],
        [concats[0].input[0], *skips[1:]],
        name="unet_encoder",
    )

    inputs = [keras.Input(x.shape[1:], dtype=x.dtype, name=x.name) for x in copy.inputs]
    scale = 2 ** (len(channels) - 1)
    height, width, _ = copy.image_shape
    control = keras.Input(
        (height * scale, width * scale, conditioning_channels), name="control"
    )
    emb = embedding(inputs[1:])
    hint = _control_encoder(control, channels, copy.widths[0])
    h = layers.Add(name="control_add")([stem(inputs[0]), hint])
    context = inputs[2:] if copy.cross_attention_dim else []
    mid, *down = encoder([h, emb, *context])
    residuals = [
        _zero_conv(s, f"controlnet_down_{i}") for i, s in enumerate([h, *down])
    ]
    residuals.append(_zero_conv(mid, "controlnet_mid"))
    return [*inputs, control], residuals


def _assign(target, source):
    for variable, value in zip(target.weights, source.weights, strict=True):
        variable.assign(value)
