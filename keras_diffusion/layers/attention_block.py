"""Spatial self-attention over the pixels of a feature map."""

import keras
from keras import layers, ops

from keras_diffusion.utils.checks import check_bool, check_float, check_int

# The block's sublayers carry names of their own, so that their variables'
# paths (`mid_attn/attention/query/kernel`, what LoRA's layer patterns match)
# are the same from build to build; earlier releases left Keras' numbered
# class names (`multi_head_attention_3`), whose class part this maps each
# name to. (The attention's projections are named by Keras: `query`, `key`,
# `value`, `attention_output`.)
EARLIER_NAMES = {"norm": "group_normalization", "attention": "multi_head_attention"}


@keras.saving.register_keras_serializable(package="keras_diffusion")
class AttentionBlock(keras.layers.Layer):
    """GroupNorm -> multi-head self-attention over H*W positions -> residual.

    It is diffusers' spatial `Attention` block (the one of `AttnDownBlock2D`
    and `UNetMidBlock2D`) with `heads = num_heads` and `dim_head = head_dim`:
    queries, keys and values project to `num_heads * head_dim` channels,
    which need not be the input's, and the output projects back.

    Args:
        num_heads: int, attention heads. Defaults to `1`.
        head_dim: optional int, the channels of each head. Defaults to
            `None`: the input channels divided by `num_heads`, which must
            divide them.
        groups: optional int, GroupNorm groups; `None` attends to the
            unnormalised input (diffusers' middle block does so with
            `resnet_time_scale_shift="scale_shift"`). Defaults to `8`.
        epsilon: float > 0, the GroupNorm epsilon. Defaults to `1e-5`.
        remat: bool, recompute the block in the backward pass instead of
            keeping its activations (`keras.remat`). Defaults to `False`.

    Call arguments:
        x: tensor of shape `(batch, H, W, C)`.

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    def __init__(
        self, num_heads=1, groups=8, epsilon=1e-5, head_dim=None, remat=False, **kwargs
    ):
        super().__init__(**kwargs)
        self.remat = check_bool("remat", remat)
        if groups is not None:
            groups = check_int("groups", groups, 1)
        if head_dim is not None:
            head_dim = check_int("head_dim", head_dim, 1)
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.groups = groups
        self.epsilon = check_float("epsilon", epsilon, greater_than=0.0)

    def build(self, input_shape):
        channels = input_shape[-1]
        if self.head_dim is None and channels % self.num_heads:
            raise ValueError(
                f"AttentionBlock: channels ({channels}) must be divisible by "
                f"`num_heads`. Received: num_heads={self.num_heads}"
            )
        # The inner layers take the block's policy, not the global one.
        policy = self.dtype_policy
        self.norm = None
        if self.groups is not None:
            self.norm = layers.GroupNormalization(
                self.groups, epsilon=self.epsilon, dtype=policy, name="norm"
            )
            self.norm.build(input_shape)
        head_dim = self.head_dim or channels // self.num_heads
        # The output projects the heads back to the input's channels.
        self.attention = layers.MultiHeadAttention(
            self.num_heads, head_dim, dtype=policy, name="attention"
        )
        seq_shape = (input_shape[0], None, channels)
        self.attention.build(seq_shape, seq_shape)

    def call(self, x):
        return keras.remat(self._forward)(x) if self.remat else self._forward(x)

    def _forward(self, x):
        shape = ops.shape(x)
        h = self.norm(x) if self.norm is not None else x
        h = ops.reshape(h, (shape[0], shape[1] * shape[2], shape[3]))
        h = self.attention(h, h)
        return x + ops.reshape(h, shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "groups": self.groups,
                "epsilon": self.epsilon,
                "head_dim": self.head_dim,
                "remat": self.remat,
            }
        )
        return config
