"""The random streams a `DiffusionModel` saves beside its weights.

The noise's `keras.random.SeedGenerator` and the denoiser's own (its
Dropout layers') are saved with the weights, so that a restored run
continues them; their states are not weights, so Keras' saving leaves them
out (`keras_diffusion.utils.keras_internals.seed_generators`).
"""

import numpy as np
from keras import ops

from keras_diffusion.utils import keras_internals

_NOISE = "seed_generator_state"
_DENOISER = "denoiser_seed_state_"


def save(store, seed_generator, denoiser):
    """Writes the states of `seed_generator` and `denoiser`'s generators."""
    store[_NOISE] = ops.convert_to_numpy(seed_generator.state.value)
    for i, generator in enumerate(keras_internals.seed_generators(denoiser)):
        store[f"{_DENOISER}{i}"] = ops.convert_to_numpy(generator.state.value)


def weights_only(store):
    """`store`'s entries without the random states, for Keras' loader."""
    return {k: store[k] for k in store.keys() if not k.startswith((_NOISE, _DENOISER))}


def load(store, seed_generator, denoiser):
    """Restores the states `save` wrote; those a file lacks (saved before
    they were saved) are left as they are."""
    if _NOISE in store:
        seed_generator.state.assign(np.asarray(store[_NOISE]))
    for i, generator in enumerate(keras_internals.seed_generators(denoiser)):
        key = f"{_DENOISER}{i}"
        if key in store:
            generator.state.assign(np.asarray(store[key]))
