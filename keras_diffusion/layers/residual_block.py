"""Residual block conditioned on a timestep embedding."""

import keras
from keras import layers, ops

from keras_diffusion.utils.checks import check_bool, check_choice, check_float

TIME_SCALE_SHIFTS = ("default", "scale_shift")
# The block's sublayers carry names of their own, so that their variables'
# paths (`down_1_res_0/conv_1/kernel`, what LoRA's layer patterns match) are
# the same from build to build; earlier releases left Keras' numbered
# class names (`conv2d_4`), whose class part this maps each name to.
EARLIER_NAMES = {
    "norm_1": "group_normalization",
    "conv_1": "conv2d",
    "emb_proj": "dense",
    "norm_2": "group_normalization",
    "dropout": "dropout",
    "conv_2": "conv2d",
    "skip": "conv2d",
}


def check_remat(remat, dropout):
    """`remat` as a bool, or raises a `ValueError` when it is combined with
    dropout: recomputed in the backward pass, dropout would draw another
    mask than the forward pass used."""
    remat = check_bool("remat", remat)
    if remat and dropout:
        raise ValueError(
            "Argument `remat` recomputes each block in the backward pass, where "
            "dropout would draw another mask than the forward pass used. "
            f"Received: remat=True, dropout={dropout}"
        )
    return remat


@keras.saving.register_keras_serializable(package="keras_diffusion")
class ResidualBlock(keras.layers.Layer):
    """GroupNorm -> swish -> conv, plus a per-channel shift from the embedding.

    The second convolution starts at zero, so a fresh block is the identity
    (through its skip path), which keeps deep U-Nets trainable from step one.
    It is diffusers' `ResnetBlock2D` with the same options.

    Args:
        filters: int, output channels.
        groups: int, GroupNorm groups; must divide both the input channels and
            `filters`. Defaults to `8`.
        dropout: float in [0, 1), dropout before the second convolution.
            Defaults to `0.0`.
        epsilon: float > 0, the GroupNorm epsilon. Defaults to `1e-5`.
        time_scale_shift: `"default"` adds the projected embedding after the
            first convolution; `"scale_shift"` projects it to a scale and a
            shift applied after the second GroupNorm,
            `norm(h) * (1 + scale) + shift` (Dhariwal & Nichol, 2021).
            Defaults to `"default"`.
        remat: bool, recompute the block in the backward pass instead of
            keeping its activations (`keras.remat`); not with `dropout`.
            Defaults to `False`.

    Call arguments:
        inputs: list `[x, embedding]`: x of shape `(batch, H, W, C)` and
            embedding of shape `(batch, E)`.

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
        - [Dhariwal & Nichol, 2021](https://arxiv.org/abs/2105.05233)
    """

    def __init__(
        self,
        filters,
        groups=8,
        dropout=0.0,
        epsilon=1e-5,
        time_scale_shift="default",
        remat=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_choice("time_scale_shift", time_scale_shift, TIME_SCALE_SHIFTS)
        self.remat = check_remat(remat, dropout)
        self.filters = filters
        self.groups = groups
        self.dropout = dropout
        self.epsilon = check_float("epsilon", epsilon, greater_than=0.0)
        self.time_scale_shift = time_scale_shift

    def build(self, input_shape):
        x_shape, _ = input_shape
        channels = x_shape[-1]
        for name, value in (("input channels", channels), ("filters", self.filters)):
            if value % self.groups:
                raise ValueError(
                    f"ResidualBlock: {name} ({value}) must be divisible by "
                    f"`groups`. Received: groups={self.groups}"
                )
        epsilon = self.epsilon
        # The inner layers take the block's policy, not the global one.
        policy = self.dtype_policy
        self.norm1 = layers.GroupNormalization(
            self.groups, epsilon=epsilon, dtype=policy, name="norm_1"
        )
        self.conv1 = layers.Conv2D(
            self.filters, 3, padding="same", dtype=policy, name="conv_1"
        )
        scale_shift = self.time_scale_shift == "scale_shift"
        self.emb_proj = layers.Dense(
            self.filters * (2 if scale_shift else 1), dtype=policy, name="emb_proj"
        )
        self.norm2 = layers.GroupNormalization(
            self.groups, epsilon=epsilon, dtype=policy, name="norm_2"
        )
        self.drop = layers.Dropout(self.dropout, dtype=policy, name="dropout")
        self.conv2 = layers.Conv2D(
            self.filters,
            3,
            padding="same",
            kernel_initializer="zeros",
            dtype=policy,
            name="conv_2",
        )
        self.skip = (
            layers.Conv2D(self.filters, 1, dtype=policy, name="skip")
            if channels != self.filters
            else None
        )
        self.norm1.build(x_shape)
        self.conv1.build(x_shape)
        self.emb_proj.build(input_shape[1])
        inner = tuple(x_shape[:-1]) + (self.filters,)
        self.norm2.build(inner)
        self.conv2.build(inner)
        if self.skip is not None:
            self.skip.build(x_shape)

    def call(self, inputs, training=None):
        x, emb = inputs
        if self.remat:
            # Positional arguments only: under `tf.function` TensorFlow's
            # `recompute_grad` takes no keyword argument (`training`).
            forward = keras.remat(lambda x, emb: self._forward(x, emb, training))
            return forward(x, emb)
        return self._forward(x, emb, training)

    def _forward(self, x, emb, training):
        h = self.conv1(keras.activations.silu(self.norm1(x)))
        emb = self.emb_proj(keras.activations.silu(emb))[:, None, None, :]
        if self.time_scale_shift == "scale_shift":
            scale, shift = ops.split(emb, 2, axis=-1)
            h = self.norm2(h) * (1.0 + scale) + shift
        else:
            h = self.norm2(h + emb)
        h = self.drop(keras.activations.silu(h), training=training)
        h = self.conv2(h)
        return h + (self.skip(x) if self.skip is not None else x)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0][:-1]) + (self.filters,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "groups": self.groups,
                "dropout": self.dropout,
                "epsilon": self.epsilon,
                "time_scale_shift": self.time_scale_shift,
                "remat": self.remat,
            }
        )
        return config
