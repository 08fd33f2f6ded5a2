"""Spatial self-attention over the pixels of a feature map."""

import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="keras_diffusion")
class AttentionBlock(keras.layers.Layer):
    """GroupNorm -> multi-head self-attention over H*W positions -> residual.

    Args:
        num_heads: int, attention heads; the channels must divide by it.
            Defaults to `1`.
        groups: int, GroupNorm groups. Defaults to `8`.

    Call arguments:
        x: tensor of shape `(batch, H, W, C)`.

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    def __init__(self, num_heads=1, groups=8, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.groups = groups

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels % self.num_heads:
            raise ValueError(
                f"AttentionBlock: channels ({channels}) must be divisible by "
                f"`num_heads`. Received: num_heads={self.num_heads}"
            )
        self.norm = layers.GroupNormalization(self.groups, epsilon=1e-5)
        self.attention = layers.MultiHeadAttention(
            self.num_heads, channels // self.num_heads
        )
        self.norm.build(input_shape)
        seq_shape = (input_shape[0], None, channels)
        self.attention.build(seq_shape, seq_shape)

    def call(self, x):
        shape = ops.shape(x)
        h = self.norm(x)
        h = ops.reshape(h, (shape[0], shape[1] * shape[2], shape[3]))
        h = self.attention(h, h)
        return x + ops.reshape(h, shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "groups": self.groups})
        return config
