"""Condition dropout: which examples of a train step are given the null."""

from keras import ops

from keras_diffusion.utils import stateless


def dropped(batch, seed, rate, training):
    """Bool `(batch,)`: the examples a step gives the null condition, each
    with probability `rate` when `training` (from the stateless `seed`);
    none otherwise. Every conditioning draws its dropout here, so that a
    process that trains on the null branch too (`TrainingStep.unconditional`)
    reads the same draw."""
    if not training or rate <= 0.0:
        return ops.zeros((batch,), "bool")
    return stateless.uniform([batch], seed) < rate
