"""Every use of Keras' and TensorFlow's private behaviour, in one place.

The library otherwise uses public APIs only. What is here has no public
equivalent; each entry says what it relies on and what breaks without it.
`tests/utils/keras_internals_test.py` checks each against the installed Keras and
fails, naming the entry, on a release that changed it; it also pins the
Keras releases this was checked with (`KNOWN_KERAS_VERSIONS`), so that a new
one is looked at before it is trusted.
"""

import keras

# Keras releases (major.minor) whose private behaviour below was checked.
KNOWN_KERAS_VERSIONS = ("3.15",)

# `keras.callbacks.BackupAndRestore` names its files in `backup_dir` with
# no public accessor. A run folder's backup written by an earlier release
# (through BackupAndRestore, or `StepBackup` before its generations) holds
# these names, and `keras_diffusion.run.backup_folder` still resumes from
# it; that module also keeps its own record under the metadata name, so
# that what reads how far a run got finds it where it always was.
BACKUP_WEIGHTS_FILE = "latest.weights.h5"
BACKUP_METADATA_FILE = "training_metadata.json"
# The suffix of the previous generation it keeps while writing a new one.
BACKUP_PREVIOUS_SUFFIX = ".bkp"

# Keras' TensorFlow trainer calls this method before training or evaluating
# a model that is not yet fully built, to build it on a first batch.
SYMBOLIC_BUILD_METHOD = "_maybe_symbolic_build"


def skip_symbolic_build(cls):
    """Class decorator: a model that builds everything itself skips Keras'
    symbolic build on the first batch.

    Keras builds a model made under a strategy on its first batch reduced
    across replicas, which fails when a global batch splits unevenly (3 + 2
    images). `DiffusionModel` builds its variables in `__init__` and its
    optimizer in `compile`, so there is nothing left to build.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        return None

    setattr(cls, SYMBOLIC_BUILD_METHOD, _maybe_symbolic_build)
    return cls


def tensorboard_profiles(callback):
    """Whether a `keras.callbacks.TensorBoard` profiles some batches.

    Its `profile_batch` argument is parsed into private start and stop
    batches, and kept under no public name. A callback that profiles needs
    its batch hooks every step.
    """
    return getattr(callback, "_stop_batch", 0) > 0


def dataset_graph_def(dataset):
    """A `tf.data.Dataset`'s graph as a `GraphDef` (TensorFlow has no public
    accessor; the diagnostics read its ops to name the slow input stages)."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())
    return graph


def keras_version():
    """The installed Keras release as `"major.minor"`."""
    return ".".join(keras.__version__.split(".")[:2])


def seed_generators(layer):
    """Every `keras.random.SeedGenerator` of `layer` and the layers inside it
    (each `Dropout`'s, at any depth), in a fixed order.

    Keras tracks them in `Layer._seed_generators` and walks sublayers with
    `Layer._flatten_layers`, with no public accessor; their states are not
    weights, so `save_weights` leaves them out, and a resumed run would draw
    other dropout masks without them.
    """
    found = []
    for sublayer in [layer, *sublayers(layer)]:
        found.extend(getattr(sublayer, "_seed_generators", ()))
    return found


def sublayers(layer):
    """Every layer inside `layer`, at any depth (the projections inside a
    `MultiHeadAttention`, the convolutions inside a custom block), in
    Keras' fixed order. Keras walks them with `Layer._flatten_layers`; its
    public `Model.layers` lists one level only."""
    return list(layer._flatten_layers(include_self=False, recursive=True))


def lora_base_kernel(layer):
    """The frozen kernel of a layer with LoRA enabled (`Dense`, `EinsumDense`,
    a convolution), as a variable.

    Keras' public `kernel` is then the merged tensor `kernel + (alpha / rank)
    a b`, which its `save_own_variables` writes, and its
    `load_own_variables` zeroes both factors: a loaded adapter could not
    train again (both factors' gradients are zero) nor keep its base
    weights bit for bit. `keras_diffusion.adapters.lora` saves the base
    kernel (`Layer._kernel`) and the factors apart through this.
    """
    return layer._kernel
