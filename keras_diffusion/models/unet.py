"""The built-in denoiser: a time-conditioned U-Net."""

import contextlib

import keras
from keras import layers

from keras_diffusion.layers import AttentionBlock, ResidualBlock, TimestepEmbedding
from keras_diffusion.layers.residual_block import TIME_SCALE_SHIFTS
from keras_diffusion.utils.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
)


def _as_tuple(name, value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"Argument `{name}` must be a tuple of ints. Received: {name}={value!r}"
        )
    return tuple(value)


def _levels(name, value, default):
    if value is None:
        return default
    value = tuple(bool(a) for a in _as_tuple(name, value))
    if len(value) != len(default):
        raise ValueError(
            f"Argument `{name}` must have one entry per level ({len(default)}). "
            f"Received: {name}={value}"
        )
    return value


def _heads(widths, num_heads, attention_head_dim, attended):
    """Attention heads per level; `attended` marks the levels that attend.

    With `attention_head_dim`, diffusers' rule: `width // attention_head_dim`
    heads of `attention_head_dim` channels, which may cover fewer channels
    than the width.
    """
    if attention_head_dim is None:
        return [num_heads] * len(widths)
    attention_head_dim = check_int("attention_head_dim", attention_head_dim, 1)
    if num_heads != 1:
        raise ValueError(
            "Pass `num_heads` or `attention_head_dim`, not both. Received: "
            f"num_heads={num_heads}, attention_head_dim={attention_head_dim}"
        )
    for width, attends in zip(widths, attended, strict=True):
        if attends and width < attention_head_dim:
            raise ValueError(
                "Every width with attention must be at least "
                f"`attention_head_dim` (one head). Received: widths={widths}, "
                f"attention_head_dim={attention_head_dim}"
            )
    return [max(1, width // attention_head_dim) for width in widths]


@contextlib.contextmanager
def _dtype_policy_scope(policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@keras.saving.register_keras_serializable(package="keras_diffusion")
class UNet(keras.Model):
    """A U-Net that predicts noise (or v, or x0) from `[x_t, t]` or `[x_t, t, y]`.

    Levels of residual blocks at decreasing resolution, self-attention at the
    chosen levels, a sinusoidal timestep embedding through an MLP added in
    every block, GroupNorm, and a zero-initialised output convolution (so an
    untrained model predicts zeros). With `num_classes`, a label embedding
    (with one extra "null" class, index `num_classes`, for classifier-free
    guidance, unless `null_class=False`) is added to the timestep embedding.

    Args:
        image_shape: tuple `(height, width, channels)`; height and width must
            divide by `2 ** (len(widths) - 1)`.
        widths: tuple of ints, channels at each level. Defaults to
            `(32, 64, 128)`.
        num_res_blocks: int, residual blocks per level. Defaults to `2`.
        attention_levels: tuple of bools, one per level: add self-attention
            after each residual block of that level. Defaults to no attention.
        num_classes: optional int, the number of class labels; `None` for an
            unconditional model. Defaults to `None`.
        embedding_dim: optional int, timestep embedding width; defaults to
            `4 * widths[0]`.
        num_heads: int, attention heads. Defaults to `1`.
        groups: int, GroupNorm groups; every width must divide by it.
            Defaults to `8`.
        dropout: float, dropout in residual blocks. Defaults to `0.0`.
        up_attention_levels: optional tuple of bools, one per level (in the
            order of `widths`), for the upsampling path. Defaults to `None`,
            which is `attention_levels`.
        mid_attention: optional bool, self-attention between the two middle
            residual blocks. Defaults to `None`, which is
            `attention_levels[-1]`.
        attention_head_dim: optional int, channels per attention head, so
            that a level of width `w` has `w // attention_head_dim` heads of
            `attention_head_dim` channels (as diffusers: with a width that
            does not divide, the heads cover fewer channels than `w`);
            replaces `num_heads`. Defaults to `None` (`num_heads` heads).
        mid_attention_groups: optional int, GroupNorm groups of the middle
            attention; `0` drops that GroupNorm. Defaults to `None`, which is
            `groups`.
        norm_eps: float > 0, the epsilon of every GroupNorm. Defaults to
            `1e-5`.
        flip_sin_to_cos: bool, cosines first in the timestep features.
            Defaults to `False`.
        freq_shift: int, the frequency shift of the timestep features (see
            `TimestepEmbedding`). Defaults to `0`.
        downsample_padding: `0` pads the strided convolutions right and
            bottom by one (TensorFlow's `"same"`); `1` pads every side by one.
            Defaults to `0`.
        resnet_time_scale_shift: `"default"` (the embedding shifts the
            features) or `"scale_shift"` (it scales and shifts the normalised
            features). Defaults to `"default"`.
        mid_block: bool, the middle block (two residual blocks around the
            middle attention); `False` is diffusers' `mid_block_type=None`.
            Defaults to `True`.
        null_class: bool, with `num_classes`: an extra label embedding,
            index `num_classes`, for the unconditional branch of guidance.
            `False` embeds the `num_classes` labels only (a diffusers model's
            `num_class_embeds`); such a model samples each class
            conditionally and has no guidance. Defaults to `True`.

    The defaults are diffusers' `UNet2DModel` with `flip_sin_to_cos=False`,
    `freq_shift=0`, `downsample_padding=0`, `attention_head_dim=None` and
    `num_class_embeds=num_classes + 1`; `keras_diffusion.from_diffusers` and
    `to_diffusers` convert between the two.

    Call arguments:
        inputs: list `[x_t, t]`, or `[x_t, t, labels]` when `num_classes` is
            set; `x_t` of shape `(batch, H, W, C)`, `t` float32 of shape
            `(batch,)` (fractional timesteps are fine), `labels` int32 of shape
            `(batch,)` in `[0, num_classes]` (`[0, num_classes)` without a
            null class).

    Example:

    ```python
    unet = keras_diffusion.UNet((16, 16, 1), widths=(16, 32), num_res_blocks=1)
    eps = unet([x_t, t])
    ```

    Reference:
        - [Ronneberger et al., 2015](https://arxiv.org/abs/1505.04597)
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
        - [Ho & Salimans, 2022](https://arxiv.org/abs/2207.12598)
    """

    def __init__(
        self,
        image_shape,
        widths=(32, 64, 128),
        num_res_blocks=2,
        attention_levels=None,
        num_classes=None,
        embedding_dim=None,
        num_heads=1,
        groups=8,
        dropout=0.0,
        up_attention_levels=None,
        mid_attention=None,
        attention_head_dim=None,
        mid_attention_groups=None,
        norm_eps=1e-5,
        flip_sin_to_cos=False,
        freq_shift=0,
        downsample_padding=0,
        resnet_time_scale_shift="default",
        mid_block=True,
        null_class=True,
        **kwargs,
    ):
        image_shape = _as_tuple("image_shape", image_shape)
        widths = _as_tuple("widths", widths)
        if len(image_shape) != 3 or not all(
            isinstance(d, int) and d > 0 for d in image_shape
        ):
            raise ValueError(
                "Argument `image_shape` must be (height, width, channels) of "
                f"positive ints. Received: image_shape={image_shape}"
            )
        if not widths:
            raise ValueError(f"Argument `widths` must not be empty. Received: {widths}")
        groups = check_int("groups", groups, 1)
        num_heads = check_int("num_heads", num_heads, 1)
        if embedding_dim is not None:
            embedding_dim = check_int("embedding_dim", embedding_dim, 1)
        dropout = check_float("dropout", dropout, 0.0, less_than=1.0)
        widths = tuple(check_int("widths", width, 1) for width in widths)
        for width in widths:
            if width % groups:
                raise ValueError(
                    "Every entry of `widths` must be divisible by `groups`. "
                    f"Received: widths={widths}, groups={groups}"
                )
        num_res_blocks = check_int("num_res_blocks", num_res_blocks, 1)
        if attention_levels is not None:
            attention_levels = _as_tuple("attention_levels", attention_levels)
        attention_levels = tuple(
            bool(a) for a in (attention_levels or (False,) * len(widths))
        )
        if len(attention_levels) != len(widths):
            raise ValueError(
                "Argument `attention_levels` must have one entry per level "
                f"({len(widths)}). Received: attention_levels={attention_levels}"
            )
        factor = 2 ** (len(widths) - 1)
        if image_shape[0] % factor or image_shape[1] % factor:
            raise ValueError(
                f"Image height and width must be divisible by {factor} (2 ** "
                f"(len(widths) - 1), for {len(widths)} levels). Received: "
                f"image_shape={image_shape}"
            )
        if num_classes is not None:
            num_classes = check_int("num_classes", num_classes, 1)
        embedding_dim = embedding_dim or 4 * widths[0]
        up_attention_levels = _levels(
            "up_attention_levels", up_attention_levels, attention_levels
        )
        mid_block = check_bool("mid_block", mid_block)
        null_class = check_bool("null_class", null_class)
        if mid_attention is None:
            mid_attention = attention_levels[-1] and mid_block
        mid_attention = check_bool("mid_attention", mid_attention)
        if mid_attention and not mid_block:
            raise ValueError(
                "Argument `mid_attention` needs the middle block. Received: "
                "mid_attention=True, mid_block=False"
            )
        attended = [
            a or u for a, u in zip(attention_levels, up_attention_levels, strict=True)
        ]
        attended[-1] = attended[-1] or mid_attention
        heads = _heads(widths, num_heads, attention_head_dim, attended)
        if mid_attention_groups is not None:
            mid_attention_groups = check_int(
                "mid_attention_groups", mid_attention_groups, 0
            )
            if mid_attention_groups and widths[-1] % mid_attention_groups:
                raise ValueError(
                    "The last entry of `widths` must be divisible by "
                    f"`mid_attention_groups`. Received: widths={widths}, "
                    f"mid_attention_groups={mid_attention_groups}"
                )
        mid_groups = groups if mid_attention_groups is None else mid_attention_groups
        norm_eps = check_float("norm_eps", norm_eps, greater_than=0.0)
        check_bool("flip_sin_to_cos", flip_sin_to_cos)
        if isinstance(downsample_padding, bool) or downsample_padding not in (0, 1):
            raise ValueError(
                "Argument `downsample_padding` must be 0 or 1. "
                f"Received: downsample_padding={downsample_padding!r}"
            )
        check_choice(
            "resnet_time_scale_shift", resnet_time_scale_shift, TIME_SCALE_SHIFTS
        )

        # Every layer takes the model's dtype policy, so that a saved model
        # loads with the policy it was built with, whatever the global one.
        policy = keras.dtype_policies.get(
            kwargs.pop("dtype", None) or keras.config.dtype_policy()
        )
        with _dtype_policy_scope(policy):
            x_in = keras.Input(image_shape, name="x_t")
            t_in = keras.Input((), name="t")
            inputs = [x_in, t_in]
            emb = TimestepEmbedding(
                widths[0],
                flip_sin_to_cos=flip_sin_to_cos,
                freq_shift=freq_shift,
                name="t_embedding",
            )(t_in)
            emb = layers.Dense(embedding_dim, activation="silu", name="t_mlp_1")(emb)
            emb = layers.Dense(embedding_dim, name="t_mlp_2")(emb)
            if num_classes is not None:
                y_in = keras.Input((), dtype="int32", name="labels")
                inputs.append(y_in)
                label_emb = layers.Embedding(
                    num_classes + int(null_class), embedding_dim, name="label_embedding"
                )(y_in)
                emb = layers.Add(name="conditioning")([emb, label_emb])

            # Layer names follow diffusers' module tree, so that the interop
            # module finds each block by name; weights are saved by layer
            # order, so names do not change what a saved model holds.
            def res(h, width, name):
                return ResidualBlock(
                    width,
                    groups=groups,
                    dropout=dropout,
                    epsilon=norm_eps,
                    time_scale_shift=resnet_time_scale_shift,
                    name=name,
                )([h, emb])

            def attend(h, level, name, attention_groups=groups):
                return AttentionBlock(
                    num_heads=heads[level],
                    groups=attention_groups or None,
                    epsilon=norm_eps,
                    head_dim=attention_head_dim,
                    name=name,
                )(h)

            h = layers.Conv2D(widths[0], 3, padding="same", name="stem")(x_in)
            skips = [h]
            for level, width in enumerate(widths):
                for i in range(num_res_blocks):
                    h = res(h, width, f"down_{level}_res_{i}")
                    if attention_levels[level]:
                        h = attend(h, level, f"down_{level}_attn_{i}")
                    skips.append(h)
                if level < len(widths) - 1:
                    padding = "same"
                    if downsample_padding:
                        padding = "valid"
                        h = layers.ZeroPadding2D(1, name=f"down_{level}_pad")(h)
                    h = layers.Conv2D(
                        width,
                        3,
                        strides=2,
                        padding=padding,
                        name=f"down_{level}_downsample",
                    )(h)
                    skips.append(h)

            last = len(widths) - 1
            if mid_block:
                h = res(h, widths[-1], "mid_res_0")
                if mid_attention:
                    h = attend(h, last, "mid_attn", mid_groups)
                h = res(h, widths[-1], "mid_res_1")

            for level in reversed(range(len(widths))):
                for i in range(num_res_blocks + 1):
                    h = layers.Concatenate(name=f"up_{level}_concat_{i}")(
                        [h, skips.pop()]
                    )
                    h = res(h, widths[level], f"up_{level}_res_{i}")
                    if up_attention_levels[level]:
                        h = attend(h, level, f"up_{level}_attn_{i}")
                if level > 0:
                    h = layers.UpSampling2D(
                        2, interpolation="nearest", name=f"up_{level}_upsample"
                    )(h)
                    h = layers.Conv2D(
                        widths[level],
                        3,
                        padding="same",
                        name=f"up_{level}_upsample_conv",
                    )(h)

            h = layers.GroupNormalization(groups, epsilon=norm_eps, name="out_norm")(h)
            h = layers.Activation("silu", name="out_act")(h)
            h = layers.Conv2D(
                image_shape[-1],
                3,
                padding="same",
                kernel_initializer="zeros",
                name="out_conv",
            )(h)
            # The prediction leaves the model in float32 under mixed precision.
            outputs = layers.Activation("linear", dtype="float32", name="prediction")(h)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.dtype_policy = policy

        self.image_shape = image_shape
        self.widths = widths
        self.num_res_blocks = num_res_blocks
        self.attention_levels = attention_levels
        self.num_classes = num_classes
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.groups = groups
        self.dropout = dropout
        self.up_attention_levels = up_attention_levels
        self.mid_attention = mid_attention
        self.attention_head_dim = attention_head_dim
        self.mid_attention_groups = mid_attention_groups
        self.norm_eps = norm_eps
        self.flip_sin_to_cos = flip_sin_to_cos
        self.freq_shift = freq_shift
        self.downsample_padding = downsample_padding
        self.resnet_time_scale_shift = resnet_time_scale_shift
        self.mid_block = mid_block
        self.null_class = null_class

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "image_shape": self.image_shape,
            "widths": self.widths,
            "num_res_blocks": self.num_res_blocks,
            "attention_levels": self.attention_levels,
            "num_classes": self.num_classes,
            "embedding_dim": self.embedding_dim,
            "num_heads": self.num_heads,
            "groups": self.groups,
            "dropout": self.dropout,
            "up_attention_levels": self.up_attention_levels,
            "mid_attention": self.mid_attention,
            "attention_head_dim": self.attention_head_dim,
            "mid_attention_groups": self.mid_attention_groups,
            "norm_eps": self.norm_eps,
            "flip_sin_to_cos": self.flip_sin_to_cos,
            "freq_shift": self.freq_shift,
            "downsample_padding": self.downsample_padding,
            "resnet_time_scale_shift": self.resnet_time_scale_shift,
            "mid_block": self.mid_block,
            "null_class": self.null_class,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
