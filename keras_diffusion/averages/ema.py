"""Exponential moving average of a model's weights, updated on the device."""

import keras
import tensorflow as tf
from keras import ops


class ExponentialMovingAverage(keras.layers.Layer):
    """Float32 shadow copies of weights, `ema <- ema - (1 - d) (ema - w)`.

    The shadows start equal to the live weights and are saved with the model's
    weights. The layer itself has no config: its owner (`DiffusionModel`)
    builds it again from its own config, so it is not registered as
    serializable.
    With `warmup`, the decay after `n` updates is `min(decay, (1 + n) / (10 + n))`
    so that early averages are not dominated by the random initialisation.

    Args:
        variables: list of variables to track.
        decay: float in [0, 1). Defaults to `0.999`.
        warmup: bool. Defaults to `True`.
    """

    def __init__(self, variables, decay=0.999, warmup=True, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.decay = decay
        self.warmup = warmup
        self.num_updates = add_update_count(self)
        self.shadows = add_shadows(self, variables, "shadow")
        self.built = True

    def current_decay(self):
        if not self.warmup:
            return ops.convert_to_tensor(self.decay, "float32")
        n = ops.cast(self.num_updates, "float32")
        return ops.minimum(self.decay, (1.0 + n) / (10.0 + n))

    def update(self, variables, applied=None):
        """Moves the averages toward `variables`.

        Args:
            variables: the tracked variables, in order.
            applied: optional bool tensor, whether the weights changed in
                this step (see `step_toward`); `None` is always.
        """
        rate = 1.0 - self.current_decay()
        step_toward(self, [self.shadows], variables, rate, applied)

    def values(self):
        """The shadow values, as tensors, in the order of the tracked variables."""
        return [shadow.value for shadow in self.shadows]

    def reset(self, variables):
        """Starts the averages again at `variables`, with no update counted."""
        restart(self, [self.shadows], variables)

    def copy_from(self, other):
        """Takes the averages and update count of `other`, an EMA of the
        same variables."""
        for shadow, value in zip(self.shadows, other.shadows, strict=True):
            shadow.assign(value)
        self.num_updates.assign(other.num_updates)

    def copy_to(self, variables):
        """Writes the averages into `variables` (e.g. to export EMA weights)."""
        for shadow, variable in zip(self.shadows, variables, strict=True):
            variable.assign(ops.cast(shadow, variable.dtype))


def add_update_count(layer):
    """`layer`'s int64 count of the updates it has averaged, at 0."""
    # Replicas hold identical live weights after an update, so the first
    # replica's result is the mirrored value.
    return layer.add_weight(
        shape=(),
        dtype="int64",
        initializer="zeros",
        trainable=False,
        aggregation="only_first_replica",
        name="num_updates",
    )


def add_shadows(layer, variables, prefix):
    """Float32 weights of `layer`, one a variable (`{prefix}_{index}`), each
    starting at its variable's value."""
    shadows = []
    for index, variable in enumerate(variables):
        shadow = layer.add_weight(
            shape=variable.shape,
            dtype="float32",
            initializer="zeros",
            trainable=False,
            aggregation="only_first_replica",
            name=f"{prefix}_{index}",
        )
        shadow.assign(ops.cast(variable, "float32"))
        shadows.append(shadow)
    return shadows


def step_toward(layer, averages, variables, rates, applied=None):
    """The one update of every average here: `a <- a - rate (a - w)` for
    each list of shadows in `averages` (with its rate in `rates`, or one
    rate for all), then one more update counted in `layer.num_updates`.

    Args:
        layer: the average's layer, holding `num_updates`.
        averages: lists of float32 shadows, each in the order of `variables`.
        variables: the tracked variables.
        rates: float tensor `1 - decay`, or a list of them, one an average.
        applied: optional bool tensor, whether the weights changed in this
            step: an optimizer that accumulates gradients
            (`gradient_accumulation_steps`) changes them once in K calls,
            and the averages move (and count) only then. `None` is always.
    """
    if not isinstance(rates, (list, tuple)):
        rates = [rates] * len(averages)
    count = ops.convert_to_tensor(1, "int64")
    if applied is not None:
        # Branch-free, so that XLA and the replicas take one graph.
        count = ops.cast(applied, "int64")
        rates = [rate * ops.cast(applied, "float32") for rate in rates]
    # Each variable and each shadow read once, into the train step's graph:
    # `assign_sub` would read the shadow again (Keras' `assign(self -
    # value)`), and each average the variable again. The arithmetic is the
    # same, `s - (s - w) * rate`, bit for bit; the step's graph has 1 + 6
    # ops a variable for each average, where it had 8 for each.
    for index, variable in enumerate(variables):
        value = ops.cast(tf.convert_to_tensor(variable), "float32")
        for shadows, rate in zip(averages, rates, strict=True):
            shadow = shadows[index]
            current = tf.convert_to_tensor(shadow)
            shadow.assign(current - (current - value) * rate)
    layer.num_updates.assign_add(count)


def restart(layer, averages, variables):
    """Every list of shadows in `averages` set to `variables`, no update
    counted."""
    for shadows in averages:
        for shadow, variable in zip(shadows, variables, strict=True):
            shadow.assign(ops.cast(variable, "float32"))
    layer.num_updates.assign(0)
