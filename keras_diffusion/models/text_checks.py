"""The data checks of a text model's `fit` and `evaluate`, before anything
runs.

A text model fits `(images, texts)` (as two arguments, or one pair as
`fit((images, labels))` takes a label model's): arrays of str, or a
`tf.data.Dataset` of `(images, captions)` batches, captions a `tf.string`
tensor `(batch,)`; the trainer tokenizes them in the input pipeline
(`keras_diffusion.trainers.fit_input`). Batches may also carry the token ids
themselves, int `(batch, sequence_length)` (`conditioning.tokenize`; a
`FrozenTextConditioning`'s embeddings, float `(batch, sequence_length,
width)`): what a `keras.utils.PyDataset` must yield, since Keras runs it
outside tf.data and strings cannot reach the compiled step.
"""

import keras
import numpy as np
import tensorflow as tf

from keras_diffusion.conditioning import FrozenTextConditioning
from keras_diffusion.models import validation

_TEXTS = (
    "A text model's `{method}` takes (images, texts): arrays of str, or a "
    "tf.data.Dataset of (images, captions) batches"
)


def text_pair(x, y):
    """`(x, y)` with one `(images, texts)` pair given as `x` taken apart,
    as Keras takes `(images, labels)` apart; anything else as it is."""
    if y is None and isinstance(x, (tuple, list)) and len(x) == 2:
        return x[0], x[1]
    return x, y


def _is_strings(array):
    return array.dtype.kind in ("U", "S") or (
        array.dtype == object and all(isinstance(t, (str, bytes)) for t in array)
    )


def _embeds(conditioning):
    """Whether the input pipeline gives `conditioning`'s step embeddings
    `(batch, sequence_length, width)` (a frozen encoder's), not token ids."""
    return isinstance(conditioning, FrozenTextConditioning)


def _check_texts(texts, count, conditioning, method):
    texts = np.asarray(texts)
    if texts.dtype == object and texts.ndim == 1:
        for index, text in enumerate(texts):
            if not isinstance(text, (str, bytes)):
                raise TypeError(
                    f"{_TEXTS.format(method=method)}: every text a str (the "
                    "empty prompt '' for none). Received: texts["
                    f"{index}]={text!r} of type {type(text).__name__}"
                )
    if _is_strings(texts):
        if texts.shape != (count,):
            raise ValueError(
                f"Texts must be one str an image, shape ({count},). "
                f"Received: texts of shape {texts.shape}"
            )
        return
    if _embeds(conditioning):
        shape = (count, conditioning.sequence_length, conditioning.width)
        if np.issubdtype(texts.dtype, np.floating) and texts.shape == shape:
            return  # a frozen encoder's embeddings (`conditioning.tokenize`)
    elif np.issubdtype(texts.dtype, np.integer) and texts.shape[:1] == (count,):
        if texts.ndim == 2:
            return  # token ids
    raise TypeError(
        f"{_TEXTS.format(method=method)}; class labels need `num_classes`. "
        f"Received: texts of dtype {texts.dtype} and shape {texts.shape}"
    )


def _check_spec(spec, conditioning, method):
    """A tf.data batch's texts: strings `(batch,)`, or token ids (a frozen
    encoder's embeddings)."""
    dtype = tf.as_dtype(spec.dtype)
    if _embeds(conditioning):
        given = dtype.is_floating and spec.shape.rank == 3
    else:
        given = dtype.is_integer and spec.shape.rank == 2
    if dtype == tf.string or given:
        return
    raise TypeError(
        f"{_TEXTS.format(method=method)}; class labels need `num_classes`. "
        f"Received: texts of dtype {dtype.name} and shape {tuple(spec.shape)}"
    )


def _split(data, method):
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        raise ValueError(
            f"{_TEXTS.format(method=method)}. Received: batches of images only, "
            f"or of {len(data) if isinstance(data, (tuple, list)) else 1} elements"
        )
    return data


def check_text_fit_data(conditioning, x, y, image_shape, latent=False, method="fit"):
    """Checks a text model's `fit` (or `evaluate`: `method`) data on the
    host, as `validation.check_fit_data` does a label model's."""
    conditioning.check_adapted(method)
    if tf.is_tensor(x) and tf.executing_eagerly():
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if y is None:
            raise ValueError(
                f"{_TEXTS.format(method=method)}. Received: images only, texts=None"
            )
        validation.check_array_images(x, image_shape, latent)
        _check_texts(y, len(x), conditioning, method)
    elif isinstance(x, tf.data.Dataset):
        if int(x.cardinality()) == 0:
            raise ValueError("Received: an empty tf.data.Dataset (0 batches)")
        images, texts = _split(x.element_spec, method)
        validation.check_image_spec(images, image_shape, latent)
        _check_spec(texts, conditioning, method)
    elif isinstance(x, keras.utils.PyDataset):
        if x.num_batches == 0:
            raise ValueError("Received: an empty PyDataset (0 batches)")
        images, texts = _split(x[0], method)
        images = np.asarray(images)
        validation.check_array_images(images, image_shape, latent)
        if _is_strings(np.asarray(texts).ravel()):
            raise TypeError(
                "A PyDataset runs outside tf.data, so its captions cannot be "
                "tokenized before the compiled step: yield token ids, "
                "`model.conditioning.tokenize(texts)`, or pass a "
                "tf.data.Dataset or arrays. Received: a batch of str texts"
            )
        _check_texts(texts, len(images), conditioning, method)


def check_text_validation(conditioning, validation, image_shape, latent=False):
    """`fit`'s `validation_data` of a text model, checked as its training
    data: `(images, texts)` arrays or a `tf.data.Dataset` of such batches
    (other forms, with sample weights, are Keras')."""
    if isinstance(validation, tf.data.Dataset):
        x, y = validation, None
    elif isinstance(validation, (tuple, list)) and len(validation) == 2:
        x, y = validation
    else:
        return
    try:
        check_text_fit_data(conditioning, x, y, image_shape, latent)
    except (TypeError, ValueError) as error:
        raise type(error)(f"Argument `validation_data`: {error}") from None
