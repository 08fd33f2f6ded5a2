"""A spatial transformer: self-attention, cross-attention to a context, GEGLU."""

import keras
from keras import layers, ops

from keras_diffusion.utils.checks import check_bool, check_float, check_int


@keras.saving.register_keras_serializable(package="keras_diffusion")
class CrossAttention(keras.layers.Layer):
    """Multi-head attention of `x` to a `context` (to `x` itself without one).

    diffusers' `Attention` as its `BasicTransformerBlock` builds it: the
    query, key and value projections (`to_q`, `to_k`, `to_v`) have no bias,
    the output projection (`to_out`) has one and returns to `x`'s channels.

    Args:
        num_heads: int, attention heads.
        head_dim: int, channels of each head.

    Call arguments:
        x: tensor of shape `(batch, N, C)`.
        context: optional tensor of shape `(batch, L, D)`; `None` attends
            to `x`.
    """

    def __init__(self, num_heads, head_dim, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_int("num_heads", num_heads, 1)
        self.head_dim = check_int("head_dim", head_dim, 1)

    def build(self, x_shape, context_shape=None):
        inner = self.num_heads * self.head_dim
        policy = self.dtype_policy
        for name in ("to_q", "to_k", "to_v"):
            setattr(
                self, name, layers.Dense(inner, use_bias=False, dtype=policy, name=name)
            )
        self.to_out = layers.Dense(x_shape[-1], dtype=policy, name="to_out")
        context_shape = context_shape or x_shape
        self.to_q.build(x_shape)
        self.to_k.build(context_shape)
        self.to_v.build(context_shape)
        self.to_out.build(tuple(x_shape[:-1]) + (inner,))

    def _heads(self, h):
        shape = ops.shape(h)
        return ops.reshape(h, (shape[0], -1, self.num_heads, self.head_dim))

    def call(self, x, context=None):
        context = x if context is None else context
        q = self._heads(self.to_q(x))
        k = self._heads(self.to_k(context))
        v = self._heads(self.to_v(context))
        h = ops.dot_product_attention(q, k, v)
        shape = ops.shape(x)
        h = ops.reshape(h, (shape[0], shape[1], self.num_heads * self.head_dim))
        return self.to_out(h)

    def compute_output_shape(self, x_shape, context_shape=None):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "head_dim": self.head_dim})
        return config


@keras.saving.register_keras_serializable(package="keras_diffusion")
class TransformerBlock(keras.layers.Layer):
    """GroupNorm -> 1x1 conv -> transformer over the pixels -> 1x1 conv ->
    residual; the transformer attends to itself, then to a context.

    It is diffusers' `Transformer2DModel` of `UNet2DConditionModel`'s
    cross-attention blocks (one `BasicTransformerBlock`, convolutional
    projections): `norm` (GroupNorm, epsilon `1e-6`), `proj_in`; then
    LayerNorm and self-attention (`norm_1`, `attn_1`), LayerNorm and
    cross-attention to the context (`norm_2`, `attn_2`), LayerNorm and a
    GEGLU feed-forward of four times the width (`norm_3`, `ff_in`, `ff_out`),
    each added to its input; then `proj_out`, added to the block's input.
    `proj_out` starts at zero, so a fresh block is the identity.

    Args:
        num_heads: int, attention heads. Defaults to `1`.
        head_dim: optional int, channels of each head. Defaults to `None`:
            the input channels divided by `num_heads` (rounded down, as
            diffusers).
        groups: int, GroupNorm groups. Defaults to `8`.
        epsilon: float > 0, the GroupNorm epsilon. Defaults to `1e-6`.
        remat: bool, recompute the block in the backward pass instead of
            keeping its activations (`keras.remat`). Defaults to `False`.

    Call arguments:
        inputs: list `[x, context]`: `x` of shape `(batch, H, W, C)` and
            `context` of shape `(batch, L, D)`, any `L`.

    Reference:
        - [Rombach et al., 2022](https://arxiv.org/abs/2112.10752)
        - [Shazeer, 2020](https://arxiv.org/abs/2002.05202) (GEGLU)
    """

    def __init__(
        self, num_heads=1, head_dim=None, groups=8, epsilon=1e-6, remat=False, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_heads = check_int("num_heads", num_heads, 1)
        if head_dim is not None:
            head_dim = check_int("head_dim", head_dim, 1)
        self.head_dim = head_dim
        self.groups = check_int("groups", groups, 1)
        self.epsilon = check_float("epsilon", epsilon, greater_than=0.0)
        self.remat = check_bool("remat", remat)

    def build(self, input_shape):
        x_shape, context_shape = input_shape
        channels = x_shape[-1]
        if channels % self.groups:
            raise ValueError(
                f"TransformerBlock: channels ({channels}) must be divisible by "
                f"`groups`. Received: groups={self.groups}"
            )
        head_dim = self.head_dim or channels // self.num_heads
        if head_dim < 1:
            raise ValueError(
                f"TransformerBlock: channels ({channels}) must be at least "
                f"`num_heads`. Received: num_heads={self.num_heads}"
            )
        inner = self.num_heads * head_dim
        # The inner layers take the block's policy, not the global one.
        policy = self.dtype_policy
        self.norm = layers.GroupNormalization(
            self.groups, epsilon=self.epsilon, dtype=policy, name="norm"
        )
        self.proj_in = layers.Conv2D(inner, 1, dtype=policy, name="proj_in")
        self.norm_1, self.norm_2, self.norm_3 = (
            layers.LayerNormalization(epsilon=1e-5, dtype=policy, name=f"norm_{i}")
            for i in (1, 2, 3)
        )
        self.attn_1, self.attn_2 = (
            CrossAttention(self.num_heads, head_dim, dtype=policy, name=f"attn_{i}")
            for i in (1, 2)
        )
        self.ff_in = layers.Dense(8 * inner, dtype=policy, name="ff_in")
        self.ff_out = layers.Dense(inner, dtype=policy, name="ff_out")
        self.proj_out = layers.Conv2D(
            channels, 1, kernel_initializer="zeros", dtype=policy, name="proj_out"
        )
        self.norm.build(x_shape)
        self.proj_in.build(x_shape)
        tokens = (x_shape[0], None, inner)
        for norm in (self.norm_1, self.norm_2, self.norm_3):
            norm.build(tokens)
        self.attn_1.build(tokens)
        self.attn_2.build(tokens, tuple(context_shape))
        self.ff_in.build(tokens)
        self.ff_out.build((x_shape[0], None, 4 * inner))
        self.proj_out.build(tuple(x_shape[:-1]) + (inner,))

    def call(self, inputs):
        x, context = inputs
        if self.remat:
            return keras.remat(self._forward)(x, context)
        return self._forward(x, context)

    def _forward(self, x, context):
        shape = ops.shape(x)
        h = self.proj_in(self.norm(x))
        inner = h.shape[-1]
        h = ops.reshape(h, (shape[0], shape[1] * shape[2], inner))
        h = h + self.attn_1(self.norm_1(h))
        h = h + self.attn_2(self.norm_2(h), ops.cast(context, h.dtype))
        value, gate = ops.split(self.ff_in(self.norm_3(h)), 2, axis=-1)
        h = h + self.ff_out(value * keras.activations.gelu(gate, approximate=False))
        h = ops.reshape(h, (shape[0], shape[1], shape[2], inner))
        return x + self.proj_out(h)

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "groups": self.groups,
                "epsilon": self.epsilon,
                "remat": self.remat,
            }
        )
        return config
