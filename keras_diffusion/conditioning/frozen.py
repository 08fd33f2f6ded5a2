"""Text as a model's condition through a frozen, pretrained text encoder: its
embeddings are computed once per distinct caption, on the host, and cached;
the train step receives embeddings, never token ids, and never runs the
encoder. The null is the empty prompt's embedding.

Any encoder serves (`FrozenTextConditioning(encoder)`: a callable from a
batch of texts to float32 `(batch, tokens, width)`, with an optional pooled
output); keras-hub's CLIP is one (`keras_diffusion.conditioning.keras_hub_clip`).
"""

import inspect
import threading

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning.dropout import dropped
from keras_diffusion.conditioning.text import PromptConditioning
from keras_diffusion.utils.checks import check_float, check_int
from keras_diffusion.utils.configurable import deserialized


def pack_pooled(sequence, pooled):
    """One context of a sequence `(batch, tokens, width)` and a pooled
    output `(batch, p)`, `p <= width`: the pooled vector, zero-padded to
    `width`, as a last token, `(batch, tokens + 1, width)`; `split_pooled`
    takes them apart (in a denoiser that wants both, as SD3's MMDiT)."""
    sequence = np.asarray(sequence, np.float32)
    pooled = np.asarray(pooled, np.float32)
    width, size = sequence.shape[-1], pooled.shape[-1]
    if pooled.ndim != 2 or size > width or len(pooled) != len(sequence):
        raise ValueError(
            "A pooled output must be (batch, p) with p at most the sequence's "
            f"width {width}. Received: pooled of shape {pooled.shape}, sequence "
            f"of shape {sequence.shape}"
        )
    last = np.zeros((len(pooled), 1, width), np.float32)
    last[:, 0, :size] = pooled
    return np.concatenate([sequence, last], axis=1)


def split_pooled(context, pooled_width):
    """`(sequence, pooled)` of a context `pack_pooled` made (a tensor or
    array `(batch, tokens + 1, width)`): the tokens, and the last token's
    first `pooled_width` entries."""
    return context[:, :-1], context[:, -1, :pooled_width]


def _named(encoder):
    """The encoder as an error names it: its class (and a layer's name), or
    a function's name."""
    if isinstance(encoder, keras.layers.Layer):
        return f"{type(encoder).__name__} {encoder.name!r}"
    return getattr(encoder, "__qualname__", type(encoder).__name__)


def _described(outputs):
    """An encoder's outputs as an error describes them: an array's shape, or
    a tuple's length."""
    if isinstance(outputs, (tuple, list)):
        return f"{len(outputs)} outputs"
    if isinstance(outputs, dict):
        return f"a dict of {sorted(outputs)}"
    shape = getattr(outputs, "shape", None)
    if shape is not None:
        return f"one array of shape {tuple(shape)}"
    return f"{outputs!r}"


def _shown_texts(texts, most=4):
    """`texts` as an error echoes them: the first `most`, then a count."""
    texts = list(texts)
    more = f" and {len(texts) - most} more" if len(texts) > most else ""
    return f"{texts[:most]!r}{more}"


def _savable(encoder):
    """Whether a `.keras` file can rebuild `encoder` from its config: a Keras
    layer, or a function (or an object of a class) registered with
    `keras.saving.register_keras_serializable` (`package>name`)."""
    if isinstance(encoder, keras.layers.Layer):
        return True
    registered = encoder if inspect.isfunction(encoder) else type(encoder)
    return ">" in keras.saving.get_registered_name(registered)


class EmbeddingCache:
    """Embeddings by caption, each computed once: `lookup(texts)` encodes
    the captions it has not seen (a batch of `batch_size` at a time, under
    a lock: the input pipeline's thread and `generate` may ask at once)."""

    def __init__(self, encode, null, batch_size):
        self.encode = encode
        self.null = null
        self.batch_size = batch_size
        self.embeddings = {}
        self.lock = threading.Lock()

    def lookup(self, texts):
        """float32 `(len(texts), tokens, width)`; the empty prompt is the
        null."""
        texts = [str(text) for text in texts]
        with self.lock:
            missing = sorted({t for t in texts if t and t not in self.embeddings})
            for start in range(0, len(missing), self.batch_size):
                chunk = missing[start : start + self.batch_size]
                self.embeddings.update(zip(chunk, self.encode(chunk), strict=True))
            null = self.null()
            rows = [self.embeddings[t] if t else null for t in texts]
        if not rows:
            return np.zeros((0,) + null.shape, np.float32)
        return np.stack(rows)

    def clear(self):
        with self.lock:
            self.embeddings.clear()


@keras.saving.register_keras_serializable(package="keras_diffusion")
class FrozenTextConditioning(PromptConditioning, keras.layers.Layer):
    """Text prompts as a model's condition, through a frozen text encoder
    whose embeddings are computed once per caption.

    The encoder is never trained (its weights are not trainable, not in
    the EMA, not adapted by LoRA) and never runs in the train step: a
    caption's embedding is computed on the host the first time the caption
    is seen, by `fit`'s input pipeline (`tokenize`, a `tf.py_function`
    over the cache) or by `generate`'s prompts (`check`), and kept in a
    host-side cache keyed by the caption (`EmbeddingCache`, a float32
    `(tokens, width)` array each: its memory grows with the distinct
    captions, not with the steps). The train step receives the embeddings
    and drops each caption to the null at the rate `dropout`; the null of
    guidance and of that dropout is the empty prompt's embedding, computed
    when the conditioning is made and saved with it (a weight, not
    trainable).

    The generic part of any frozen encoder: keras-hub's CLIP
    (`keras_diffusion.conditioning.keras_hub_clip.KerasHubCLIPEncoder`) is
    one, the text encoders of SD3 (CLIP-L, CLIP-G, T5) others.

    Args:
        encoder: the text encoder, a callable taking a batch of texts, a
            1-D `tf.string` tensor, and returning float `(batch, tokens,
            width)` (a tensor or array), or `(sequence, pooled)` with
            `pooled=True`. Every text's embeddings must have the same
            number of tokens, that of the empty prompt's (`sequence_length`):
            pad to a fixed length, not to a batch's longest text. It is
            called on the host, eagerly, with the captions it has not seen.
            A Keras layer (registered with
            `keras.saving.register_keras_serializable`, its config
            rebuilding it) is tracked: the conditioning's `.keras` file
            holds what that layer's config and weights hold. A function
            registered so is saved by its name; a plain function cannot be
            rebuilt from a file, and saving a model with one is refused
            before the file is written.
        dropout: float in [0, 1), the share of training captions replaced
            by the empty prompt (caption dropout, for guidance). Defaults
            to `0.1`.
        pooled: bool, the encoder returns two outputs, `(sequence,
            pooled)`, the second a pooled output `(batch, p)`: it travels
            as one more token (`pack_pooled`), and a denoiser that wants it
            apart takes it with `split_pooled`.
            Defaults to `False`.
        encode_batch_size: int, the most captions the encoder is given at
            once. Defaults to `64`.

    Example:

    ```python
    encoder = keras_diffusion.conditioning.KerasHubCLIPEncoder(
        preset="clip_vit_base_patch32"
    )
    text = keras_diffusion.FrozenTextConditioning(encoder, dropout=0.1)
    unet = keras_diffusion.UNet((32, 32, 3), cross_attention_dim=text.width)
    model = keras_diffusion.DiffusionModel(unet, conditioning=text)
    ```
    """

    # Its captions' condition (`tokenize`) is their cached embeddings. No
    # vocabulary of its own to record (a run's vocabulary.json).
    vocabulary = None

    def __init__(
        self, encoder, dropout=0.1, pooled=False, encode_batch_size=64, **kwargs
    ):
        if not callable(encoder):
            raise TypeError(
                "Argument `encoder` must be a callable from texts to "
                f"embeddings. Received: encoder={encoder!r}"
            )
        kwargs.pop("trainable", None)  # frozen, whatever a config says
        super().__init__(**kwargs)
        self.encoder = encoder
        self.dropout = check_float("dropout", dropout, 0.0, less_than=1.0)
        self.pooled = bool(pooled)
        self.encode_batch_size = check_int("encode_batch_size", encode_batch_size, 1)
        null = self._encode([""])[0]
        self.sequence_length, self.width = null.shape
        # A weight: a loaded file's encoder gets its weights after this
        # runs, and the null with them.
        self.null_embedding = self.add_weight(
            shape=null.shape,
            initializer="zeros",
            trainable=False,
            name="null_embedding",
        )
        self.null_embedding.assign(null)
        self._cache = EmbeddingCache(
            self._fixed_length,
            lambda: ops.convert_to_numpy(self.null_embedding),
            self.encode_batch_size,
        )
        self.trainable = False
        self.built = True

    def _encode(self, texts):
        """The encoder's float32 `(len(texts), tokens, width)` of `texts`."""
        outputs = self.encoder(tf.constant(list(texts), tf.string))
        if self.pooled:
            if not isinstance(outputs, (tuple, list)) or len(outputs) != 2:
                raise ValueError(
                    "Argument `pooled=True` needs an encoder that returns two "
                    "outputs, `(sequence, pooled)`. Received: the encoder "
                    f"{_named(self.encoder)} returned {_described(outputs)}"
                )
            sequence, pooled = outputs
            outputs = pack_pooled(
                ops.convert_to_numpy(sequence), ops.convert_to_numpy(pooled)
            )
        outputs = np.asarray(ops.convert_to_numpy(outputs), np.float32)
        if outputs.ndim != 3 or len(outputs) != len(texts):
            raise ValueError(
                "Argument `encoder` must return (batch, tokens, width) "
                f"embeddings. Received: outputs of shape {outputs.shape} for "
                f"{len(texts)} texts"
            )
        return outputs

    def _fixed_length(self, texts):
        """`_encode(texts)`, refused unless its tokens and width are those of
        the empty prompt's: a cached caption's embeddings are stacked with
        any other's, in the pipeline's batches and `generate`'s prompts."""
        outputs = self._encode(texts)
        if outputs.shape[1:] != (self.sequence_length, self.width):
            raise ValueError(
                f"The encoder {_named(self.encoder)} must return a fixed number "
                f"of tokens, `sequence_length`={self.sequence_length} (the empty "
                f"prompt's), each of width {self.width}: pad every text to one "
                "length, not to a batch's longest. "
                f"Received: {outputs.shape[1]} tokens of width "
                f"{outputs.shape[2]} for the texts {_shown_texts(texts)}"
            )
        return outputs

    def embeddings(self, texts):
        """float32 `(len(texts), sequence_length, width)` embeddings of
        `texts` (str), each caption encoded the first time it is seen."""
        return self._cache.lookup(texts)

    def _lookup(self, texts):
        texts = [text.decode("utf-8") for text in texts.numpy().ravel()]
        return self.embeddings(texts)

    def tokenize(self, texts):
        """The embeddings of a `tf.string` batch `(batch,)` of captions, as
        the input pipeline makes them: looked up on the host (a
        `tf.py_function`, which runs the encoder eagerly on a caption not
        seen yet: in tf.data or eagerly, not under XLA)."""
        texts = tf.convert_to_tensor(texts, tf.string)
        outputs = tf.py_function(self._lookup, [texts], tf.float32)
        outputs.set_shape(texts.shape.concatenate([self.sequence_length, self.width]))
        return outputs

    def check_adapted(self, argument):
        """Nothing to adapt: the encoder is pretrained."""

    # The interface `DiffusionModel` asks (as `TextConditioning`).

    def example(self):
        """The denoiser's third input for its build call: the null."""
        return ops.convert_to_tensor(self.null(1))

    def prompt_inputs(self, texts):
        """The embeddings of checked prompts: float32 `(len(texts),
        sequence_length, width)`."""
        return self.embeddings(texts)

    def null(self, count):
        """The empty prompt's embeddings for `count` images."""
        null = ops.convert_to_numpy(self.null_embedding)
        return np.repeat(null[None], count, axis=0).astype(np.float32)

    def in_step(self, embeddings, batch, seed, training):
        """A batch's embeddings in the train step, each caption replaced by
        the empty prompt's with probability `dropout` when `training` (from
        the stateless `seed`). Captions that reach the step as strings
        (`evaluate` on arrays of str) are looked up here, in graph mode but
        not under XLA."""
        if embeddings.dtype == tf.string:
            embeddings = self.tokenize(embeddings)
        embeddings = ops.cast(embeddings, "float32")
        if training and self.dropout > 0.0:
            drop = dropped(batch, seed, self.dropout, training)
            null = ops.cast(self.null_embedding, "float32")[None]
            embeddings = ops.where(drop[:, None, None], null, embeddings)
        return embeddings

    def null_in_step(self, batch, training):
        """The empty prompt's embeddings for `batch` examples in the train
        step."""
        null = ops.cast(self.null_embedding, "float32")[None]
        return ops.repeat(null, batch, axis=0)

    def encode(self, embeddings, values=None):
        """The denoiser's third input: the embeddings themselves (the
        encoder is frozen: no EMA weights); strings are looked up first."""
        if (
            tf.is_tensor(embeddings)
            and embeddings.dtype == tf.string
            or (isinstance(embeddings, np.ndarray) and embeddings.dtype.kind in "OSU")
        ):
            embeddings = self.tokenize(embeddings)
        return ops.cast(embeddings, "float32")

    # Serialization.

    def load_own_variables(self, store):
        super().load_own_variables(store)
        # Embeddings of the weights before the load are stale.
        self._cache.clear()

    def get_config(self):
        # What a `.keras` file could not rebuild is refused here, before
        # `DiffusionModel.save` (which asks for its config first) writes.
        if not _savable(self.encoder):
            raise TypeError(
                "Argument `encoder` cannot be saved: a .keras file rebuilds a "
                "Keras layer, or a function registered with "
                "@keras.saving.register_keras_serializable(); a plain function "
                "cannot be rebuilt from a file. Received: "
                f"encoder={self.encoder!r}"
            )
        config = super().get_config()
        config.pop("trainable", None)
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "dropout": self.dropout,
                "pooled": self.pooled,
                "encode_batch_size": self.encode_batch_size,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialized(config, "encoder"))
