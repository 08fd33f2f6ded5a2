"""The tiny denoisers the tests build: one implementation of each.

Imported as `from tests.denoisers import ...`; the `make_unet` fixture of
tests/conftest.py is `tiny_unet`.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_diffusion import UNet

# One level of a few thousand parameters on 8x8 images: seconds to trace,
# enough to learn. A test of what the levels do (down- and upsampling, a
# level's attention) names two: `tiny_unet(widths=(4, 8))`.
TINY_UNET = dict(widths=(8,), num_res_blocks=1, groups=2, embedding_dim=16)


def tiny_unet(image_shape=(8, 8, 1), **overrides):
    """A `keras_diffusion.UNet` of `TINY_UNET`, any option overridden."""
    return UNet(image_shape, **{**TINY_UNET, **overrides})


@keras.saving.register_keras_serializable(package="keras_diffusion_tests")
class TimestepRecorder(keras.layers.Layer):
    """Passes x through and writes mean(t) of each call into a history buffer."""

    def __init__(self, size=32, **kwargs):
        super().__init__(**kwargs)
        self.size = size
        self.history = self.add_weight(
            shape=(size,), initializer="zeros", trainable=False, name="history"
        )
        self.count = self.add_weight(
            shape=(), dtype="int32", initializer="zeros", trainable=False, name="n"
        )

    def call(self, x, t):
        index = ops.minimum(self.count, self.size - 1)
        self.history.assign(
            ops.scatter_update(self.history, index[None, None], ops.mean(t)[None])
        )
        self.count.assign_add(1)
        return x

    def get_config(self):
        return {**super().get_config(), "size": self.size}


@keras.saving.register_keras_serializable(package="keras_diffusion_tests")
class HostIdentity(keras.layers.Layer):
    """Runs on the host through `tf.numpy_function`, which XLA cannot compile."""

    def call(self, x):
        y = tf.numpy_function(lambda a: a, [x], tf.float32)
        return tf.ensure_shape(y, x.shape)


def conv_denoiser(
    image_shape=(8, 8, 1),
    width=8,
    convs=2,
    record=False,
    host_op=False,
    num_classes=None,
    dropout=0.0,
    context_shape=None,
    time_inputs=1,
):
    """A Functional denoiser `[x_t, t] -> output` (`[x_t, t, labels]` with
    `num_classes`): `convs` 3x3 convolutions, an embedding of t (and of the
    label) added after the first.

    It traces in a fraction of a U-Net's time, and the state a step touches
    is the same (weights, optimizer, EMA, noise seed).

    Args:
        image_shape: tuple, the images'.
        width: int, the channels of the hidden convolutions.
        convs: int >= 2, the convolutions.
        record: bool, put a `TimestepRecorder` (named "timestep_recorder")
            first, to see the t of each call.
        host_op: bool, pass x through a `HostIdentity` first, an op XLA
            cannot compile.
        num_classes: int or `None`, a conditional denoiser of this many
            classes and the null class (id `num_classes`); pass the same
            `num_classes` to `DiffusionModel`.
        context_shape: `(sequence_length, dim)` or `None`, a text
            denoiser `[x_t, t, context]` (contract item 2): the flattened
            context, projected, is added with t's embedding.
        dropout: float, a `Dropout` of this rate before each convolution
            between the first and the last, each in a block of its own
            (a `keras.Sequential`), as a U-Net's ResBlocks nest theirs.
        time_inputs: int, the times of an example: 1, `t` of shape
            `(batch,)`; more, `(batch, time_inputs)` (a mean flow's pair).
    """
    t_shape = () if time_inputs == 1 else (time_inputs,)
    x_in, t_in = keras.Input(image_shape), keras.Input(t_shape)
    x = x_in
    if record:
        x = TimestepRecorder(name="timestep_recorder")(x, t_in)
    if host_op:
        x = HostIdentity()(x)
    t = keras.layers.Reshape((time_inputs,))(t_in)
    embedding = keras.layers.Dense(width, activation="silu")(t)
    h = keras.layers.Conv2D(width, 3, padding="same", activation="silu")(x)
    if num_classes is not None:
        y_in = keras.Input((), dtype="int32")
        embedding = embedding + keras.layers.Embedding(num_classes + 1, width)(y_in)
    if context_shape is not None:
        y_in = keras.Input(tuple(context_shape))
        context = keras.layers.Flatten()(y_in)
        embedding = embedding + keras.layers.Dense(width)(context)
    h = h + keras.layers.Reshape((1, 1, width))(embedding)
    for _ in range(convs - 2):
        conv = keras.layers.Conv2D(width, 3, padding="same", activation="silu")
        if dropout:
            conv = keras.Sequential([keras.layers.Dropout(dropout), conv])
        h = conv(h)
    out = keras.layers.Conv2D(image_shape[-1], 3, padding="same")(h)
    conditional = num_classes is not None or context_shape is not None
    inputs = [x_in, t_in, y_in] if conditional else [x_in, t_in]
    return keras.Model(inputs, out)
