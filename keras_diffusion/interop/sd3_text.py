"""SD3's text as a model's condition: keras-hub's frozen CLIP-L, CLIP-G (and
T5) encoders, their embeddings computed once per caption.

The MMDiT takes two things from the text: the sequence `context` (CLIP-L's
and CLIP-G's penultimate hidden states side by side, padded to the T5 width,
then T5's tokens or as many zero tokens) and the `pooled_projection` (both
CLIPs' projected end-of-text states). `DiffusionModel` passes one condition
tensor to its denoiser, through every path it has (caption dropout in the
train step, the guidance batch of the conditional and null branches, the
null of negative prompts), so both travel packed in one float32 tensor
`(batch, sequence + 1, width)`: the context's tokens, then one row whose
first entries are the pooled vector (`pack`); `SD3Denoiser` unpacks it. One
tensor costs one extra token's row and no change to any of those paths.

The encoders are frozen and outside the model's weights (not trained, not
averaged, not saved in a `.keras` file): the embeddings of each distinct
caption are computed once, with keras-hub's own `encode_text_step` (the
embeddings its `generate` computes), and kept on the host (`embed`). `fit`'s
input pipeline turns a batch's captions into their embeddings
(`tokenize`, which `keras_diffusion.trainers.fit_input` calls), so the train
step never runs a text encoder; `generate` embeds its prompts the same way.
"""

import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.utils import stateless
from keras_diffusion.utils.checks import check_float, check_int

# Captions embedded in one encoder call.
_EMBED_BATCH = 16


def pack(context, pooled):
    """`(batch, sequence + 1, max(width, pooled width))` float32: the
    context's tokens, then a row holding the pooled vector (zero-padded)."""
    context = np.asarray(context, np.float32)
    pooled = np.asarray(pooled, np.float32)
    batch, sequence, width = context.shape
    packed = np.zeros((batch, sequence + 1, max(width, pooled.shape[-1])), np.float32)
    packed[:, :sequence, :width] = context
    packed[:, sequence, : pooled.shape[-1]] = pooled
    return packed


def unpack(condition, context_width, pooled_width):
    """The `(context, pooled)` tensors of a packed condition (`pack`)."""
    return condition[:, :-1, :context_width], condition[:, -1, :pooled_width]


def sd3_embeddings(backbone, preprocessor, texts):
    """The packed embeddings (`pack`) of `texts` (a list of str) by the
    backbone's text encoders, as keras-hub's `generate` computes them
    (`encode_text_step`; its negative branch is given one caption only)."""
    token_ids = preprocessor.generate_preprocess(tf.constant(texts))
    negative = {name: ids[:1] for name, ids in token_ids.items()}
    context, _, pooled, _ = backbone.encode_text_step(token_ids, negative)
    return pack(ops.convert_to_numpy(context), ops.convert_to_numpy(pooled))


class SD3TextConditioning:
    """Prompts as an SD3 model's condition, through keras-hub's frozen text
    encoders; the null of guidance and of caption dropout is the empty
    prompt's embeddings, as SD3's.

    Answers the interface `DiffusionModel` asks of a conditioning (as
    `keras_diffusion.TextConditioning`: `example`, `check`, `prepare`,
    `null`, `in_step`, `encode`), with embeddings where that one has token
    ids. Holds no Keras weights.

    Args:
        backbone: a keras-hub `StableDiffusion3Backbone`.
        preprocessor: its `StableDiffusion3TextToImagePreprocessor`.
        dropout: float in [0, 1), the share of training captions replaced
            by the empty prompt. Defaults to `0.0`.
        embed_fn: optional `embed_fn(backbone, preprocessor, texts)` giving
            packed embeddings. Defaults to `sd3_embeddings`.
    """

    argument = "prompts"
    input_dtype = "float32"
    tokenizes = True
    trainable_variables = ()

    def __init__(self, backbone, preprocessor, dropout=0.0, embed_fn=None):
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.dropout = check_float("dropout", dropout, 0.0, less_than=1.0)
        self.embed_fn = sd3_embeddings if embed_fn is None else embed_fn
        self.context_width = int(backbone.t5_hidden_dim)
        self.pooled_width = int(backbone.clip_hidden_dim)
        self.cache = {}
        self.encoder_calls = 0
        self._null = self.embed([""])[0]
        self.sequence_length, self.width = self._null.shape

    def embed(self, texts):
        """float32 `(len(texts), sequence_length, width)`: the packed
        embeddings of `texts` (str), each distinct caption encoded once and
        kept in `cache`."""
        texts = [str(t) for t in texts]
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        for start in range(0, len(missing), _EMBED_BATCH):
            chunk = missing[start : start + _EMBED_BATCH]
            self.encoder_calls += 1
            packed = self.embed_fn(self.backbone, self.preprocessor, chunk)
            self.cache.update(zip(chunk, packed, strict=True))
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)

    def tokenize(self, texts):
        """What `fit`'s input pipeline makes of a `tf.string` batch of
        captions: their embeddings (a host call, `embed`)."""

        def lookup(batch):
            words = [t.decode("utf-8") for t in batch.numpy().reshape(-1)]
            return self.embed(words)

        out = tf.py_function(lookup, [texts], tf.float32)
        out.set_shape([None, self.sequence_length, self.width])
        return out

    # The interface `DiffusionModel` asks (as `TextConditioning`).

    def example(self):
        return ops.convert_to_tensor(self.null(1))

    def check_adapted(self, argument):
        """Nothing to adapt: the tokenizers are keras-hub's."""

    def check(self, prompts, num_images, guidance_scale, argument="prompts"):
        """`generate`'s prompts: `(embeddings, guided)`; `None` is the empty
        prompt."""
        check_int("num_images", num_images, 1)
        if prompts is None:
            return self.null(num_images), guidance_scale != 1.0
        texts = [prompts] * num_images if isinstance(prompts, str) else prompts
        texts = np.asarray(texts, dtype=object)
        if texts.shape != (num_images,) or not all(isinstance(t, str) for t in texts):
            raise ValueError(
                f"Argument `{argument}` must be a str or a sequence of "
                f"num_images={num_images} str. Received: {argument}={prompts!r}"
            )
        return self.embed(list(texts)), guidance_scale != 1.0

    def check_negative(self, negative, num_images):
        if negative is None:
            return None
        return self.check(negative, num_images, 1.0, "negative_prompts")[0]

    def prepare(self, embeddings, num_images, seed):
        return embeddings

    def null(self, count):
        """The empty prompt's embeddings for `count` images."""
        return np.repeat(self._null[None], count, axis=0)

    def in_step(self, embeddings, batch, seed, training):
        """A batch's embeddings in the train step, each replaced by the
        empty prompt's with probability `dropout` when `training`."""
        if tf.is_tensor(embeddings) and embeddings.dtype == tf.string:
            # `evaluate` on arrays of str
            embeddings = self.tokenize(embeddings)
        embeddings = ops.cast(embeddings, "float32")
        if training and self.dropout > 0.0:
            drop = stateless.uniform([batch], seed) < self.dropout
            null = ops.convert_to_tensor(self._null)[None]
            embeddings = ops.where(drop[:, None, None], null, embeddings)
        return embeddings

    def encode(self, embeddings, values=None):
        return ops.cast(embeddings, "float32")

    def get_config(self):
        # What a `.keras` file, `enable_lora` and `merge_lora` rebuild a
        # model from.
        raise NotImplementedError(
            "A model of keras_diffusion.from_keras_hub has no config yet: its "
            "text encoders are keras-hub's, outside the model's weights, so it "
            "does not save to a .keras file nor rebuild (enable_lora, "
            "merge_lora). Set LoRA with from_keras_hub(lora_rank=...) and "
            "export with keras_diffusion.to_keras_hub."
        )
