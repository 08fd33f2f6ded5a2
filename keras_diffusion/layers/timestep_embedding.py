"""Sinusoidal embedding of (possibly fractional) diffusion timesteps."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_diffusion")
class TimestepEmbedding(keras.layers.Layer):
    """Sinusoidal features of a timestep, as in the Transformer and DDPM.

    Half the features are `sin(t * f_i)` and half `cos(t * f_i)` with
    frequencies `f_i = max_period ** (-i / half)`. The layer always computes in
    float32, also under a mixed-precision policy, since `t` reaches ~1000.

    Args:
        dim: int, even number of output features.
        max_period: float, the longest period of the sinusoids. Defaults to
            `10000.0`.

    Call arguments:
        t: float or int tensor of shape `(batch,)`; fractional values are fine.

    Example:

    ```python
    features = TimestepEmbedding(32)(keras.ops.array([0.0, 10.5, 999.0]))
    ```

    Reference:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
    """

    def __init__(self, dim, max_period=10000.0, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if not isinstance(dim, int) or dim < 2 or dim % 2:
            raise ValueError(
                f"Argument `dim` must be an even int >= 2. Received: dim={dim!r}"
            )
        self.dim = dim
        self.max_period = float(max_period)

    def call(self, t):
        half = self.dim // 2
        exponent = -math.log(self.max_period) * ops.arange(half, dtype="float32")
        freqs = ops.exp(exponent / half)
        args = ops.cast(t, "float32")[:, None] * freqs[None, :]
        return ops.concatenate([ops.sin(args), ops.cos(args)], axis=-1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.dim)

    def get_config(self):
        config = super().get_config()
        config.update({"dim": self.dim, "max_period": self.max_period})
        config.pop("dtype", None)
        return config
