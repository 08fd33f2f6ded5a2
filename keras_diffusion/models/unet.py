"""The built-in denoiser: a time-conditioned U-Net."""

import contextlib

import keras
from keras import layers

from keras_diffusion.layers import (
    AttentionBlock,
    ResidualBlock,
    TimestepEmbedding,
    TransformerBlock,
)
from keras_diffusion.models.unet_args import ARGUMENTS, check_unet_args


@contextlib.contextmanager
def dtype_policy_scope(policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _conditioning(args):
    """`(inputs, embedding, context)`: the inputs; the timestep embedding
    through its MLP, plus the label embedding when the model is conditioned
    on labels, or the pooled context through its MLP when it attends to a
    context; and the context (`None` without cross-attention)."""
    x_in = keras.Input(args.image_shape, name="x_t")
    t_in = keras.Input(() if args.time_inputs == 1 else (args.time_inputs,), name="t")
    inputs = [x_in, t_in]
    emb = TimestepEmbedding(
        args.widths[0],
        flip_sin_to_cos=args.flip_sin_to_cos,
        freq_shift=args.freq_shift,
        name="t_embedding",
    )(t_in)
    emb = layers.Dense(args.embedding_dim, activation="silu", name="t_mlp_1")(emb)
    emb = layers.Dense(args.embedding_dim, name="t_mlp_2")(emb)
    context = None
    if args.num_classes is not None:
        y_in = keras.Input((), dtype="int32", name="labels")
        inputs.append(y_in)
        label_emb = layers.Embedding(
            args.num_classes + int(args.null_class),
            args.embedding_dim,
            name="label_embedding",
        )(y_in)
        emb = layers.Add(name="conditioning")([emb, label_emb])
    elif args.cross_attention_dim is not None:
        context = keras.Input((None, args.cross_attention_dim), name="context")
        inputs.append(context)
        # diffusers' class_embed_type="projection" of the mean-pooled context.
        pooled = layers.GlobalAveragePooling1D(name="context_pool")(context)
        pooled = layers.Dense(
            args.embedding_dim, activation="silu", name="context_mlp_1"
        )(pooled)
        pooled = layers.Dense(args.embedding_dim, name="context_mlp_2")(pooled)
        emb = layers.Add(name="conditioning")([emb, pooled])
    return inputs, emb, context


# Layer names follow diffusers' module tree, so that the interop module finds
# each block by name; weights are saved by layer order, so names do not change
# what a saved model holds.
def _res(h, emb, width, name, args):
    return ResidualBlock(
        width,
        groups=args.groups,
        dropout=args.dropout,
        epsilon=args.norm_eps,
        time_scale_shift=args.resnet_time_scale_shift,
        remat=args.remat,
        name=name,
    )([h, emb])


def _attend(h, context, level, name, args, groups):
    """Self-attention, or with a context the transformer block, whose heads
    split the width evenly (diffusers' `Transformer2DModel`)."""
    if context is not None:
        return TransformerBlock(
            num_heads=args.heads[level],
            head_dim=args.widths[level] // args.heads[level],
            groups=args.groups,
            remat=args.remat,
            name=name,
        )([h, context])
    return AttentionBlock(
        num_heads=args.heads[level],
        groups=groups or None,
        epsilon=args.norm_eps,
        head_dim=args.attention_head_dim,
        remat=args.remat,
        name=name,
    )(h)


def _downsample(h, width, level, args):
    padding = "same"
    if args.downsample_padding:
        padding = "valid"
        h = layers.ZeroPadding2D(1, name=f"down_{level}_pad")(h)
    return layers.Conv2D(
        width,
        3,
        strides=2,
        padding=padding,
        name=f"down_{level}_downsample",
    )(h)


def _down_path(x, emb, context, args):
    """The stem and the levels at decreasing resolution: `(h, skips)`."""
    h = layers.Conv2D(args.widths[0], 3, padding="same", name="stem")(x)
    skips = [h]
    for level, width in enumerate(args.widths):
        for i in range(args.num_res_blocks):
            h = _res(h, emb, width, f"down_{level}_res_{i}", args)
            if args.attention_levels[level]:
                h = _attend(
                    h, context, level, f"down_{level}_attn_{i}", args, args.groups
                )
            skips.append(h)
        if level < len(args.widths) - 1:
            h = _downsample(h, width, level, args)
            skips.append(h)
    return h, skips


def _middle(h, emb, context, args):
    """Two residual blocks at the lowest resolution, attention between
    (none without `mid_block`, diffusers' `mid_block_type=None`)."""
    if not args.mid_block:
        return h
    last = len(args.widths) - 1
    h = _res(h, emb, args.widths[-1], "mid_res_0", args)
    if args.mid_attention:
        h = _attend(h, context, last, "mid_attn", args, args.mid_groups)
    return _res(h, emb, args.widths[-1], "mid_res_1", args)


def _up_path(h, skips, emb, context, args):
    """The levels at increasing resolution, each block taking a skip."""
    for level in reversed(range(len(args.widths))):
        width = args.widths[level]
        for i in range(args.num_res_blocks + 1):
            h = layers.Concatenate(name=f"up_{level}_concat_{i}")([h, skips.pop()])
            h = _res(h, emb, width, f"up_{level}_res_{i}", args)
            if args.up_attention_levels[level]:
                h = _attend(
                    h, context, level, f"up_{level}_attn_{i}", args, args.groups
                )
        if level > 0:
            h = layers.UpSampling2D(
                2, interpolation="nearest", name=f"up_{level}_upsample"
            )(h)
            h = layers.Conv2D(
                width, 3, padding="same", name=f"up_{level}_upsample_conv"
            )(h)
    return h


def _output(h, args):
    """GroupNorm, swish and the zero-initialised convolution to the image."""
    h = layers.GroupNormalization(
        args.groups,
        epsilon=args.norm_eps,
        name="out_norm",
    )(h)
    h = layers.Activation("silu", name="out_act")(h)
    h = layers.Conv2D(
        args.image_shape[-1],
        3,
        padding="same",
        kernel_initializer="zeros",
        name="out_conv",
    )(h)
    # The prediction leaves the model in float32 under mixed precision.
    return layers.Activation("linear", dtype="float32", name="prediction")(h)


def _build(args):
    """The U-Net's graph: `(inputs, prediction)`."""
    inputs, emb, context = _conditioning(args)
    h, skips = _down_path(inputs[0], emb, context, args)
    h = _middle(h, emb, context, args)
    h = _up_path(h, skips, emb, context, args)
    return inputs, _output(h, args)


@keras.saving.register_keras_serializable(package="keras_diffusion")
class UNet(keras.Model):
    """A U-Net that predicts noise (or v, or x0) from `[x_t, t]`, `[x_t, t, y]`
    or `[x_t, t, context]`.

    Levels of residual blocks at decreasing resolution, self-attention at the
    chosen levels, a sinusoidal timestep embedding through an MLP added in
    every block, GroupNorm, and a zero-initialised output convolution (so an
    untrained model predicts zeros). With `num_classes`, a label embedding
    (with one extra "null" class, index `num_classes`, for classifier-free
    guidance, unless `null_class=False`) is added to the timestep embedding.
    With `cross_attention_dim`, the U-Net attends to a context (a text
    encoder's tokens): each attention block is a `TransformerBlock`
    (self-attention, cross-attention to the context, feed-forward), the
    middle block attends too, and the context's mean over its tokens,
    through a linear layer, swish and a linear layer, is added to the
    timestep embedding (diffusers' `UNet2DConditionModel` with
    `class_embed_type="projection"`).

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
        remat: bool, recompute each residual and attention block in the
            backward pass instead of keeping its activations (`keras.remat`;
            `keras.RematScope` cannot: under `tf.function` TensorFlow's
            `recompute_grad` refuses the `training` keyword a block is
            called with): the same loss and gradients at lower peak memory,
            for about one more forward pass. Not with `dropout`.
            Defaults to `False`.
        cross_attention_dim: optional int, the width of the context's
            tokens: the U-Net takes `[x_t, t, context]` and attends to it
            where `attention_levels` (and `up_attention_levels`) put
            attention, and in the middle block (`mid_attention` defaults to
            `True`). A transformer block's heads split the width evenly
            (`width // heads` channels each, as diffusers). Not with
            `num_classes` nor `mid_attention_groups`. Defaults to `None`: no
            context, and the U-Net is the same as without the argument.
        time_inputs: int >= 1, the times each example is given: with k > 1
            (a mean-flow process's interval, and its guidance scale where
            guidance is a condition: `MeanFlowSchedule.time_inputs`), `t` is
            `(batch, k)` and the sinusoidal features of each column,
            concatenated, enter the time MLP. Defaults to `1`: `t` is
            `(batch,)` and the U-Net is the same as without the argument.

    The defaults are diffusers' `UNet2DModel` with `flip_sin_to_cos=False`,
    `freq_shift=0`, `downsample_padding=0`, `attention_head_dim=None` and
    `num_class_embeds=num_classes + 1`; `keras_diffusion.from_diffusers` and
    `to_diffusers` convert between the two. With `cross_attention_dim` it is
    a `UNet2DConditionModel` (docs/interop.md, "The U-Net with
    cross-attention").

    Call arguments:
        inputs: list `[x_t, t]`, or `[x_t, t, labels]` when `num_classes` is
            set; `x_t` of shape `(batch, H, W, C)`, `t` float32 of shape
            `(batch,)` (fractional timesteps are fine; `(batch,
            time_inputs)` with `time_inputs`), `labels` int32 of shape
            `(batch,)` in `[0, num_classes]` (`[0, num_classes)` without a
            null class); `[x_t, t, context]` with `cross_attention_dim`,
            `context` float32 of shape `(batch, L, cross_attention_dim)`
            for any `L`.

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
        remat=False,
        cross_attention_dim=None,
        time_inputs=1,
        **kwargs,
    ):
        given = locals()
        args = check_unet_args(**{name: given[name] for name in ARGUMENTS})
        # Every layer takes the model's dtype policy, so that a saved model
        # loads with the policy it was built with, whatever the global one.
        policy = keras.dtype_policies.get(
            kwargs.pop("dtype", None) or keras.config.dtype_policy()
        )
        with dtype_policy_scope(policy):
            inputs, outputs = _build(args)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.dtype_policy = policy

        for name in ARGUMENTS:
            setattr(self, name, getattr(args, name))

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **{name: getattr(self, name) for name in ARGUMENTS},
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
