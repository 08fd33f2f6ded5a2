"""Text as a model's condition: a tokenizer built from the run's captions and
a small text encoder trained with the model; the null is the empty prompt."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning.dropout import dropped
from keras_diffusion.utils.checks import check_float, check_int

# Punctuation splits words ("heart-shaped" -> "heart shaped"); RE2's class.
_PUNCTUATION = r"[[:punct:]]"


def standardize(texts):
    """Lower case, punctuation replaced by spaces (a `tf.string` tensor)."""
    lowered = tf.strings.lower(tf.convert_to_tensor(texts), encoding="utf-8")
    return tf.strings.regex_replace(lowered, _PUNCTUATION, " ")


class _Untracked:
    """Holds the tokenizer out of Keras' sight: a `TextVectorization` among
    a model's layers turns XLA off for all of its step (Keras reads its
    `supports_jit`, False), though tokens are made outside the step; its
    vocabulary is saved in `TextConditioning`'s config instead."""

    def __init__(self, layer):
        self.layer = layer


@keras.saving.register_keras_serializable(package="keras_diffusion")
class TransformerLayer(keras.layers.Layer):
    """A pre-norm transformer layer: self-attention, then a feed-forward
    block (4x the width, GELU), each added to its input.

    Args:
        width: int, the embedding width.
        heads: int, the attention heads (dividing `width`).
    """

    def __init__(self, width, heads, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.heads = heads
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=1e-5, name="attention_norm"
        )
        self.attention = keras.layers.MultiHeadAttention(
            heads, width // heads, name="attention"
        )
        self.mlp_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="mlp_norm")
        self.mlp_in = keras.layers.Dense(4 * width, activation="gelu", name="mlp_in")
        self.mlp_out = keras.layers.Dense(width, name="mlp_out")

    def build(self, input_shape):
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_in.build(input_shape)
        self.mlp_out.build(tuple(input_shape[:-1]) + (4 * self.width,))

    def call(self, x, training=False):
        h = self.attention_norm(x)
        x = x + self.attention(h, h, training=training)
        return x + self.mlp_out(self.mlp_in(self.mlp_norm(x)))

    def get_config(self):
        return {**super().get_config(), "width": self.width, "heads": self.heads}


def prompt_texts(prompts, num_images, argument="prompts"):
    """`generate`'s prompts (a str, or a sequence of `num_images` str) as a
    NumPy array of `num_images` str, checked on the host."""
    texts = [prompts] * num_images if isinstance(prompts, str) else prompts
    texts = np.asarray(texts, dtype=object)
    if texts.shape != (num_images,) or not all(isinstance(t, str) for t in texts):
        raise ValueError(
            f"Argument `{argument}` must be a str or a sequence of "
            f"num_images={num_images} str. Received: {argument}={prompts!r}"
        )
    return texts.astype(str)


def conditioned_on_text(model):
    """Whether `model` (a `DiffusionModel`, or anything with a
    `conditioning`) takes prompts: its conditioning tokenizes text."""
    return getattr(getattr(model, "conditioning", None), "tokenizes", False)


class PromptConditioning:
    """What the text conditionings share: `generate`'s prompts checked on
    the host and turned into the denoiser's condition by the subclass's
    `prompt_inputs(texts)`; the empty prompt is the null."""

    argument = "prompts"
    input_dtype = "float32"
    # A text model: the input pipeline makes its captions' condition
    # (`tokenize`).
    tokenizes = True

    def check(self, prompts, num_images, guidance_scale, argument="prompts"):
        """`generate`'s prompts on the host: `(inputs, guided)`, `inputs`
        the condition of `num_images` images; `None` is the empty prompt."""
        if prompts is None:
            return self.null(num_images), guidance_scale != 1.0
        texts = prompt_texts(prompts, num_images, argument)
        self.check_adapted(argument)
        return self.prompt_inputs(texts), guidance_scale != 1.0

    def check_negative(self, negative, num_images):
        """The negative prompts' condition, or `None` (the empty prompt)."""
        if negative is None:
            return None
        return self.check(negative, num_images, 1.0, "negative_prompts")[0]

    def prepare(self, inputs, num_images, seed):
        return inputs


@keras.saving.register_keras_serializable(package="keras_diffusion")
class TextConditioning(PromptConditioning, keras.layers.Layer):
    """Text prompts as a model's condition: tokenizer and encoder.

    The tokenizer is a `keras.layers.TextVectorization` (lower case,
    punctuation splitting words: "heart-shaped" is "heart shaped"), its
    vocabulary built from the run's captions by `adapt` and saved in the
    layer's config, so a `.keras` file takes raw strings with no other file.
    Tokenizing is TensorFlow string ops: it runs in `fit`'s input pipeline
    and before the sampling loop, never in the compiled (XLA) step.

    The encoder, trained with the model, gives the denoiser's third input:
    token and learned position embeddings, `depth` pre-norm transformer
    layers and a final LayerNorm, float32 `(batch, sequence_length, width)`
    for every token (the padding's too; no mask). The null of guidance and
    of caption dropout is the empty prompt: all padding tokens (id 0).

    Args:
        sequence_length: int, tokens a prompt (longer ones are cut, shorter
            padded). Defaults to `16`.
        max_tokens: int, the vocabulary's size at most, padding and
            out-of-vocabulary included. Defaults to `4096`.
        width: int, the embedding width `D`. Defaults to `64`.
        depth: int, transformer layers. Defaults to `2`.
        heads: int, attention heads (dividing `width`). Defaults to `4`.
        dropout: float in [0, 1), the share of training captions replaced
            by the empty prompt (caption dropout, for guidance). Defaults
            to `0.1`.
        vocabulary: optional list of str, the words (without the padding
            and out-of-vocabulary tokens); `adapt` sets it. Defaults to
            `None`.

    Example:

    ```python
    text = keras_diffusion.TextConditioning(sequence_length=8)
    text.adapt(captions)
    model = keras_diffusion.DiffusionModel(denoiser, conditioning=text)
    ```
    """

    def __init__(
        self,
        sequence_length=16,
        max_tokens=4096,
        width=64,
        depth=2,
        heads=4,
        dropout=0.1,
        vocabulary=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.sequence_length = check_int("sequence_length", sequence_length, 1)
        self.max_tokens = check_int("max_tokens", max_tokens, 3)
        self.width = check_int("width", width, 1)
        self.depth = check_int("depth", depth, 0)
        self.heads = check_int("heads", heads, 1)
        if self.width % self.heads:
            raise ValueError(
                f"Argument `heads` must divide width={width}. Received: heads={heads}"
            )
        self.dropout = check_float("dropout", dropout, 0.0, less_than=1.0)
        if vocabulary is not None:
            vocabulary = [str(word) for word in vocabulary]
        tokenizer = keras.layers.TextVectorization(
            max_tokens=self.max_tokens,
            standardize=None,
            output_mode="int",
            output_sequence_length=self.sequence_length,
            vocabulary=vocabulary,
            name="tokenizer",
        )
        self._tokenizer = _Untracked(tokenizer)
        self.token_embedding = keras.layers.Embedding(
            self.max_tokens, self.width, name="token_embedding"
        )
        self.blocks = [
            TransformerLayer(self.width, self.heads, name=f"layer_{i}")
            for i in range(self.depth)
        ]
        self.final_norm = keras.layers.LayerNormalization(
            epsilon=1e-5, name="final_norm"
        )

    def build(self, input_shape=None):
        shape = (None, self.sequence_length, self.width)
        self.position_embedding = self.add_weight(
            shape=(self.sequence_length, self.width),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="position_embedding",
        )
        self.token_embedding.build((None, self.sequence_length))
        for block in self.blocks:
            block.build(shape)
        self.final_norm.build(shape)
        if not self.trainable:
            # A config's `trainable: False` (a LoRA model's frozen encoder,
            # loaded) freezes no weight made since: Keras' setter would, but
            # on TensorFlow setting the value a layer holds does nothing.
            for variable in self.weights:
                variable.trainable = False

    def call(self, tokens, training=False):
        x = self.token_embedding(tokens) + self.position_embedding[None]
        for block in self.blocks:
            x = block(x, training=training)
        return ops.cast(self.final_norm(x), "float32")

    # The tokenizer.

    def adapt(self, captions):
        """Builds the vocabulary from `captions` (a sequence of str, or a
        `tf.data.Dataset` of strings): the most frequent words, up to
        `max_tokens` with padding and out-of-vocabulary."""
        if isinstance(captions, tf.data.Dataset):
            data = captions.map(standardize)
        else:
            data = standardize(np.asarray(captions, dtype=object).astype(str))
        self._tokenizer.layer.adapt(data)

    def set_vocabulary(self, words):
        """Sets the vocabulary to `words` (a list of str, without the
        padding and out-of-vocabulary tokens, as `vocabulary` gives it): a
        resumed run tokenizes as it began, whatever its data says now."""
        self._tokenizer.layer.set_vocabulary([str(w) for w in words])

    @property
    def vocabulary(self):
        """The words (no padding or out-of-vocabulary token); `None` before
        `adapt`."""
        tokenizer = self._tokenizer.layer
        words = tokenizer.get_vocabulary(include_special_tokens=False)
        return [str(word) for word in words] or None

    def check_adapted(self, argument):
        if self.vocabulary is None:
            raise ValueError(
                "The text conditioning has no vocabulary yet: call "
                "`conditioning.adapt(captions)` with the training captions "
                f"before `{argument}`. Received: vocabulary=None"
            )

    def tokenize(self, texts):
        """int32 token ids `(batch, sequence_length)` of a `tf.string` batch
        (TensorFlow string ops: in tf.data or eagerly, not under XLA)."""
        return ops.cast(self._tokenizer.layer(standardize(texts)), "int32")

    # The interface `DiffusionModel` asks (as `ClassLabels`).

    def example(self):
        """The denoiser's third input for its build call: the empty
        prompt's embeddings, which also builds the encoder."""
        return self.encode(self.null(1))

    def prompt_inputs(self, texts):
        """The tokens of checked prompts: int32 `(len(texts),
        sequence_length)`."""
        return ops.convert_to_numpy(self.tokenize(texts))

    def null(self, count):
        """The empty prompt's tokens for `count` images: all padding."""
        return np.zeros((count, self.sequence_length), np.int32)

    def in_step(self, tokens, batch, seed, training):
        """The encoder's embeddings of a batch's tokens in the train step,
        each caption replaced by the empty prompt with probability
        `dropout` when `training` (from the stateless `seed`). Strings
        that reach the step (`evaluate` on arrays of str) are tokenized
        here, which runs in graph mode but not under XLA."""
        if tokens.dtype == tf.string:
            tokens = self.tokenize(tokens)
        tokens = ops.cast(tokens, "int32")
        if training and self.dropout > 0.0:
            drop = dropped(batch, seed, self.dropout, training)
            tokens = ops.where(drop[:, None], 0, tokens)
        return self(tokens, training=training)

    def null_in_step(self, batch, training):
        """The empty prompt's embeddings for `batch` examples in the train
        step."""
        tokens = ops.zeros((batch, self.sequence_length), "int32")
        return self(tokens, training=training)

    def encode(self, tokens, values=None):
        """The embeddings of `tokens`, with the weights `values` (the EMA's,
        in the order of `trainable_variables`) when given; strings (a
        batch's captions) are tokenized first, outside XLA."""
        if (
            tf.is_tensor(tokens)
            and tokens.dtype == tf.string
            or (isinstance(tokens, np.ndarray) and tokens.dtype.kind in "OSU")
        ):
            tokens = self.tokenize(tokens)
        tokens = ops.cast(tokens, "int32")
        if values is None:
            return self(tokens, training=False)
        non_trainable = [v.value for v in self.non_trainable_variables]
        outputs, _ = self.stateless_call(list(values), non_trainable, tokens)
        return outputs

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "max_tokens": self.max_tokens,
            "width": self.width,
            "depth": self.depth,
            "heads": self.heads,
            "dropout": self.dropout,
            "vocabulary": self.vocabulary,
        }
