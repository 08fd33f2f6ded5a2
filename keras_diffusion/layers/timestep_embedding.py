"""Sinusoidal embedding of (possibly fractional) diffusion timesteps."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_diffusion")
class TimestepEmbedding(keras.layers.Layer):
    """Sinusoidal features of a timestep, as in the Transformer and DDPM.

    Half the features are `sin(t * f_i)` and half `cos(t * f_i)` with
    frequencies `f_i = max_period ** (-i / (half - freq_shift))`. The layer
    always computes in float32, also under a mixed-precision policy, since `t`
    reaches ~1000. With `flip_sin_to_cos` and `freq_shift` it is diffusers'
    `Timesteps` of the same options.

    Args:
        dim: int, even number of output features.
        max_period: float, the longest period of the sinusoids. Defaults to
            `10000.0`.
        flip_sin_to_cos: bool, put the cosines first. Defaults to `False`.
        freq_shift: int in `[0, dim // 2)`, subtracted from `half` in the
            frequency exponent (diffusers' `freq_shift`). Defaults to `0`.

    Call arguments:
        t: float or int tensor of shape `(batch,)`; fractional values are
            fine. Of shape `(batch, k)` (several times of each example, as a
            mean-flow network takes its interval's end and length), the `dim`
            features of each column, concatenated: `(batch, k * dim)`.

    Example:

    ```python
    features = TimestepEmbedding(32)(keras.ops.array([0.0, 10.5, 999.0]))
    ```

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    def __init__(
        self, dim, max_period=10000.0, flip_sin_to_cos=False, freq_shift=0, **kwargs
    ):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(
                f"Argument `dim` must be an even int >= 2. Received: dim={dim!r}"
            )
        if not isinstance(flip_sin_to_cos, bool):
            raise TypeError(
                "Argument `flip_sin_to_cos` must be a bool. "
                f"Received: flip_sin_to_cos={flip_sin_to_cos!r}"
            )
        if (
            isinstance(freq_shift, bool)
            or not isinstance(freq_shift, int)
            or not 0 <= freq_shift < dim // 2
        ):
            raise ValueError(
                f"Argument `freq_shift` must be an int in [0, {dim // 2}). "
                f"Received: freq_shift={freq_shift!r}"
            )
        self.dim = dim
        self.max_period = float(max_period)
        self.flip_sin_to_cos = flip_sin_to_cos
        self.freq_shift = freq_shift

    def call(self, t):
        half = self.dim // 2
        exponent = -math.log(self.max_period) * ops.arange(half, dtype="float32")
        freqs = ops.exp(exponent / (half - self.freq_shift))
        t = ops.cast(t, "float32")
        args = t[..., None] * freqs
        if self.flip_sin_to_cos:
            features = ops.concatenate([ops.cos(args), ops.sin(args)], axis=-1)
        else:
            features = ops.concatenate([ops.sin(args), ops.cos(args)], axis=-1)
        if len(t.shape) == 1:
            return features
        return ops.reshape(features, (-1, t.shape[1] * self.dim))

    def compute_output_shape(self, input_shape):
        columns = input_shape[1] if len(input_shape) > 1 else 1
        return (input_shape[0], columns * self.dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "dim": self.dim,
                "max_period": self.max_period,
                "flip_sin_to_cos": self.flip_sin_to_cos,
                "freq_shift": self.freq_shift,
            }
        )
        config.pop("dtype", None)
        return config
