"""What `DiffusionModel.fit` feeds Keras: one stall removed from every epoch.

tf.data's autotuning runs a thread beside every iterator. When an epoch's
iterator is deleted (Keras makes a new one each epoch), the deletion waits for
that thread, and on a small CPU the wait is often most of an epoch: on the
2-core CPU of docs/why-slow.md ("Half-speed epochs") 20 of 60 epochs of a
bare `tf.function` loop, 29 of 60 of `keras.Model.fit` and 32 of 60 of this
`fit` on a plain `tf.data` pipeline took 1.8x as long as the others, the
difference spent deleting the last iterator; with autotuning off, 0 of 60 in
each case. So `fit` turns it off, where the user has not chosen:

- a `tf.data.Dataset` (`x` or `validation_data`) whose options leave
  `autotune.enabled` unset gets it set to False: its `AUTOTUNE` map
  parallelism is then fixed at the number of cores (up to 16), and its
  `prefetch(AUTOTUNE)` buffer sized by tf.data's simpler heuristic; an
  explicit `options.autotune.enabled = True` is kept;
- NumPy arrays (or eager tensors) become the same `tf.data` pipeline Keras
  builds for them (a whole-array shuffle per epoch when `shuffle`, batches of
  `batch_size`, the last one partial), without autotuning. Not with
  `validation_split`, `sample_weight`, `class_weight`, `shuffle="batch"`, under
  a multi-worker strategy or above `MAX_ARRAY_BYTES`: those keep Keras' path.

Under a multi-worker strategy, the epoch-ordered batches of
`keras_diffusion.data` (`dataset.epoch_batches(order)`, what `train` fits)
are read per worker: each worker's pipeline reads only its replicas' slices
of every global batch (`replica_batches`), through
`strategy.distribute_datasets_from_function`, instead of every worker
reading each whole batch and keeping its share (tf.data's `DATA` auto-shard
policy, what any other dataset gets). The slices and their order are the
same on every run with the same seed.

A `keras.utils.PyDataset` keeps Keras' path: with `workers > 1` Keras already
turns autotuning off; with one worker the stall remains (docs/why-slow.md).

A text model's captions (a model whose `conditioning` tokenizes) become token
ids here, in the input pipeline, not in the compiled step (TensorFlow's
string ops do not compile with XLA): a `tf.data.Dataset` of `(images,
captions)` is mapped through `conditioning.tokenize`, arrays of str become
that pipeline (also where Keras' array path would otherwise take them), for
`fit` and for `evaluate` (`prepare_evaluation`). Its validation data take the
same path: `validation_data` as `(images, texts)`
arrays becomes batches of `validation_batch_size` (else `batch_size`) in
order, and `validation_split` keeps the arrays' last share for them, as
Keras cuts it.
"""

import numpy as np
import tensorflow as tf

from keras_diffusion.conditioning import conditioned_on_text
from keras_diffusion.data.pipeline import without_autotune
from keras_diffusion.distribute import strategy as distribute

# Arrays this large stay on Keras' path: `from_tensor_slices` would copy them
# into the dataset's graph, which has a 2 GB limit.
MAX_ARRAY_BYTES = 1 << 30

# `fit` arguments that only Keras' array path implements (with
# `validation_split`).
_KERAS_ARRAY_ARGUMENTS = ("sample_weight", "class_weight")


def _tokenizer(model):
    """The text model's `conditioning.tokenize`, else `None`."""
    return model.conditioning.tokenize if conditioned_on_text(model) else None


def with_tokens(model, dataset):
    """`dataset` with its `(images, captions)` captions as token ids, for a
    text model; any other dataset as it is."""
    tokenize = _tokenizer(model)
    spec = dataset.element_spec
    if (
        tokenize is None
        or not isinstance(spec, tuple)
        or len(spec) != 2
        or spec[1].dtype != tf.string
    ):
        return dataset
    return dataset.map(lambda images, texts: (images, tokenize(texts)))


def _is_text(values):
    """Whether `values` (`fit`'s `y`, or validation texts) are arrays of str."""
    return isinstance(values, (list, tuple, np.ndarray)) and np.asarray(
        values
    ).dtype.kind in ("U", "S", "O")


def _text_validation(model, kwargs, training=None):
    """`kwargs` with a text model's validation texts as token ids, in
    batches: `validation_data` of `(images, texts)` arrays, or the last
    `validation_split` of `training` (the `(images, texts)` arrays `fit`
    trains on, returned without it); anything else as it is. Returns
    `(kwargs, training)`."""
    validation = kwargs.get("validation_data")
    split = kwargs.get("validation_split")
    if split and training is not None and validation is None:
        # Keras' cut: the last share, unshuffled.
        images, texts = training
        at = int(np.floor(len(images) * (1.0 - split)))
        if not 0 < at < len(images):
            empty = "validation" if at else "training"
            raise ValueError(
                f"Argument `validation_split` leaves no {empty} example of "
                f"{len(images)}. Received: validation_split={split!r}"
            )
        validation = (images[at:], texts[at:])
        training = (images[:at], texts[:at])
    if not (isinstance(validation, (tuple, list)) and len(validation) == 2):
        return kwargs, training
    images, texts = validation
    if not (_is_array(images) and _is_text(texts)):
        return kwargs, training
    kwargs.pop("validation_split", None)
    size = kwargs.pop("validation_batch_size", None) or kwargs.get("batch_size")
    kwargs["validation_data"] = _text_batches(model, images, texts, size)
    return kwargs, training


def _text_batches(model, images, texts, batch_size):
    """Arrays of images and str texts as batches of `batch_size` (32 where
    `None`) in order, the texts as token ids: validation and `evaluate`."""
    batches = _arrays_as_dataset(
        np.asarray(images), np.asarray(texts, dtype=str), int(batch_size or 32), False
    )
    return with_tokens(model, batches)


def _arrays_as_dataset(images, labels, batch_size, shuffle):
    source = images if labels is None else (images, labels)
    dataset = tf.data.Dataset.from_tensor_slices(source)
    if shuffle:
        dataset = dataset.shuffle(len(images), reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    return without_autotune(dataset)


def _is_array(value):
    return isinstance(value, np.ndarray) or (
        tf.is_tensor(value) and tf.executing_eagerly()
    )


def _per_worker(model, strategy, batches):
    """`batches` (with `replica_batches`) distributed as each worker's own
    replicas' slices (a text model's captions as token ids)."""

    def worker_batches(context):
        local = context.num_replicas_in_sync // context.num_input_pipelines
        first = context.input_pipeline_id * local
        own = batches.replica_batches(context.num_replicas_in_sync, first, local)
        return without_autotune(with_tokens(model, own))

    return strategy.distribute_datasets_from_function(worker_batches)


def prepare_evaluation(model, x, y, kwargs):
    """`(x, y, kwargs)` for `keras.Model.evaluate`: a text model's captions
    as token ids in the input pipeline, as `prepare` makes them for `fit`
    (arrays of str become batches of `batch_size` in order); any other
    model's data as they are."""
    if _tokenizer(model) is None:
        return x, y, kwargs
    kwargs = dict(kwargs)
    if isinstance(x, tf.data.Dataset):
        return without_autotune(with_tokens(model, x)), y, kwargs
    if not (_is_array(x) and _is_text(y)):
        return x, y, kwargs
    batches = _text_batches(model, x, y, kwargs.pop("batch_size", None))
    return batches, None, kwargs


def prepare(model, x, y, kwargs):
    """`(x, y, kwargs)` for `keras.Model.fit`, with the stall removed.

    Args:
        model: the `DiffusionModel` about to `fit`.
        x, y: `fit`'s data arguments.
        kwargs: `fit`'s other keyword arguments (not changed; a copy is
            returned).
    """
    kwargs = dict(kwargs)
    if _tokenizer(model) is not None:
        kwargs, _ = _text_validation(model, kwargs)
    # Keras makes a new iterator of the validation data at every epoch too.
    if isinstance(kwargs.get("validation_data"), tf.data.Dataset):
        validation = with_tokens(model, kwargs["validation_data"])
        kwargs["validation_data"] = without_autotune(validation)
    if isinstance(x, tf.data.Dataset):
        strategy = model.distribute_strategy
        if hasattr(x, "replica_batches") and distribute.is_multi_worker(strategy):
            return _per_worker(model, strategy, x), y, kwargs
        return without_autotune(with_tokens(model, x)), y, kwargs
    texts = _tokenizer(model) is not None and isinstance(y, (list, tuple))
    if texts:
        y = np.asarray(y, dtype=str)
    if not _is_array(x) or (y is not None and not _is_array(y)):
        return x, y, kwargs
    texts = texts or (y is not None and np.asarray(y).dtype.kind in ("U", "S", "O"))
    if texts:
        kwargs, (x, y) = _text_validation(model, kwargs, (np.asarray(x), y))
    shuffle = kwargs.get("shuffle", True)
    keras_path = (
        kwargs.get("validation_split")
        or any(kwargs.get(name) is not None for name in _KERAS_ARRAY_ARGUMENTS)
        or shuffle not in (True, False)
        or distribute.is_multi_worker(model.distribute_strategy)
    )
    if keras_path and not texts:
        return x, y, kwargs
    images = np.asarray(x)
    labels = None if y is None else np.asarray(y)
    nbytes = images.nbytes + (0 if labels is None else labels.nbytes)
    if nbytes > MAX_ARRAY_BYTES and not texts:
        return x, y, kwargs
    batch_size = int(kwargs.pop("batch_size", None) or 32)
    kwargs["shuffle"] = False
    dataset = _arrays_as_dataset(images, labels, batch_size, shuffle is not False)
    return without_autotune(with_tokens(model, dataset)), None, kwargs
