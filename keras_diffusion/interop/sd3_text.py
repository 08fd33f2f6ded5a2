"""SD3's text as a model's condition: keras-hub's frozen CLIP-L, CLIP-G (and
T5) encoders behind the library's frozen text conditioning.

The MMDiT takes two things from the text: the sequence `context` (CLIP-L's
and CLIP-G's penultimate hidden states side by side, padded to the T5 width,
then T5's tokens or as many zero tokens) and the `pooled_projection` (both
CLIPs' projected end-of-text states). `DiffusionModel` passes one condition
tensor to its denoiser, through every path it has (caption dropout in the
train step, the guidance batch of the conditional and null branches, the
null of negative prompts), so both travel in one float32 tensor `(batch,
tokens + 1, width)`: the context's tokens, then the pooled vector as a last
token (`keras_diffusion.conditioning.pack_pooled`); `SD3Denoiser` takes them
apart (`split_pooled`). One tensor costs one extra token and no change to
any of those paths.

`keras_diffusion.FrozenTextConditioning` does the rest: each distinct
caption is encoded once, on the host, and cached; `fit`'s input pipeline and
`generate` look captions up there, so the train step never runs a text
encoder. The encoders are frozen (not trained, not averaged) and saved with
the model: a `.keras` file holds their configs and weights, and the
tokenizers' vocabularies in the config (a file loaded in safe mode reads no
file outside it).
"""

import base64

import keras
import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning import FrozenTextConditioning

_PARTS = ("clip_l", "clip_g")
_PREPROCESSORS = ("clip_l_preprocessor", "clip_g_preprocessor", "t5_preprocessor")


class _Untracked:
    """Holds the preprocessor out of Keras' sight: its string ops would turn
    XLA off for the model's step (Keras reads `supports_jit`), and it has no
    weights; the config holds it, vocabularies included."""

    def __init__(self, preprocessor):
        self.preprocessor = preprocessor


@keras.saving.register_keras_serializable(package="keras_diffusion")
class SD3Projection(keras.layers.Layer):
    """A CLIP encoder's pooled output: its end-of-text token's state (the
    token of the largest id) through a bias-free dense layer, as keras-hub's
    SD3 backbone projects it (its `clip_l_projection`, `clip_g_projection`).

    Args:
        hidden_dim: int, the CLIP encoder's width.
    """

    def __init__(self, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim = int(hidden_dim)
        self.dense = keras.layers.Dense(
            self.hidden_dim, use_bias=False, dtype=self.dtype_policy, name="dense"
        )
        self.dense.build((None, self.hidden_dim))
        self.built = True

    def call(self, inputs, token_ids):
        indices = ops.cast(ops.argmax(token_ids, axis=-1), "int32")[:, None, None]
        pooled = ops.squeeze(ops.take_along_axis(inputs, indices, axis=1), axis=1)
        return self.dense(pooled)

    def get_config(self):
        return {**super().get_config(), "hidden_dim": self.hidden_dim}


@keras.saving.register_keras_serializable(package="keras_diffusion")
class SD3TextEncoder(keras.layers.Layer):
    """The text encoders of keras-hub's SD3 as a `FrozenTextConditioning`
    encoder: a batch of texts to `(context, pooled)`, as keras-hub's
    `StableDiffusion3Backbone.encode_text_step` computes them (the
    embeddings its `generate` uses). `of_backbone` makes one of a backbone.

    Args:
        clip_l: keras-hub's `CLIPTextEncoder` (CLIP-L).
        clip_g: keras-hub's `CLIPTextEncoder` (CLIP-G).
        preprocessor: a `StableDiffusion3TextToImagePreprocessor`.
        t5: optional keras-hub `T5Encoder`. Defaults to `None`.

    Attributes:
        calls: int, the encoder calls made (each on captions not seen yet).
    """

    def __init__(self, clip_l, clip_g, preprocessor, t5=None, **kwargs):
        kwargs.pop("trainable", None)  # frozen, whatever a config says
        super().__init__(**kwargs)
        self.clip_l = clip_l
        self.clip_g = clip_g
        self.t5 = t5
        self.clip_l_projection = SD3Projection(
            clip_l.hidden_dim, dtype=clip_l.dtype_policy, name="clip_l_projection"
        )
        self.clip_g_projection = SD3Projection(
            clip_g.hidden_dim, dtype=clip_g.dtype_policy, name="clip_g_projection"
        )
        self._parts = _Untracked(preprocessor)
        self.calls = 0
        self.trainable = False
        self.built = True

    @classmethod
    def of_backbone(cls, backbone, preprocessor):
        """The text encoder of a keras-hub `StableDiffusion3Backbone` (its
        own CLIP and T5 layers; its projections' kernels copied)."""
        encoder = cls(backbone.clip_l, backbone.clip_g, preprocessor, t5=backbone.t5)
        for name in ("clip_l_projection", "clip_g_projection"):
            kernel = getattr(backbone, name).dense.kernel
            getattr(encoder, name).dense.kernel.assign(kernel)
        return encoder

    @property
    def preprocessor(self):
        return self._parts.preprocessor

    @property
    def pooled_width(self):
        return int(self.clip_l.hidden_dim + self.clip_g.hidden_dim)

    @property
    def context_width(self):
        """The context's width: T5's, or 4096 without T5 (keras-hub's)."""
        return 4096 if self.t5 is None else int(self.t5.hidden_dim)

    def call(self, texts):
        self.calls += 1
        token_ids = self.preprocessor.generate_preprocess(tf.convert_to_tensor(texts))
        outputs = {}
        for name in _PARTS:
            hidden = getattr(self, name)({"token_ids": token_ids[name]}, training=False)
            projection = getattr(self, f"{name}_projection")
            pooled = projection(hidden["sequence_output"], token_ids[name])
            outputs[name] = (pooled, hidden["intermediate_output"])
        pooled = ops.concatenate([outputs[n][0] for n in _PARTS], axis=-1)
        context = ops.concatenate([outputs[n][1] for n in _PARTS], axis=-1)
        padding = self.context_width - self.pooled_width
        context = ops.pad(context, [[0, 0], [0, 0], [0, padding]])
        if self.t5 is not None:
            ids = token_ids["t5"]
            t5 = self.t5(
                {"token_ids": ids, "padding_mask": ops.ones_like(ids)}, training=False
            )
            context = ops.concatenate([context, t5], axis=-2)
        else:
            length = self.clip_l.max_sequence_length
            context = ops.pad(context, [[0, 0], [0, length], [0, 0]])
        return context, pooled

    def get_config(self):
        config = super().get_config()
        config.pop("trainable", None)
        config.update(
            {
                "clip_l": keras.saving.serialize_keras_object(self.clip_l),
                "clip_g": keras.saving.serialize_keras_object(self.clip_g),
                "t5": keras.saving.serialize_keras_object(self.t5),
                "preprocessor": _preprocessor_config(self.preprocessor),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("clip_l", "clip_g", "t5", "preprocessor"):
            if name == "preprocessor":
                _restore_vocabularies(config[name])
            config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)


def _tokenizer_configs(serialized):
    """`(name, tokenizer config)` of each preprocessor in a serialized
    `StableDiffusion3TextToImagePreprocessor`."""
    for name in _PREPROCESSORS:
        part = serialized["config"].get(name)
        if part is not None:
            yield name, part["config"]["tokenizer"]["config"]


def _preprocessor_config(preprocessor):
    """The serialized preprocessor with its tokenizers' vocabularies, which
    keras-hub keeps out of their configs (in files read by path): CLIP's
    vocabulary and merges, T5's SentencePiece model (base64)."""
    serialized = keras.saving.serialize_keras_object(preprocessor)
    for name, config in _tokenizer_configs(serialized):
        tokenizer = getattr(preprocessor, name).tokenizer
        if getattr(tokenizer, "proto", None) is not None:
            config["proto_base64"] = base64.b64encode(tokenizer.proto).decode()
        else:
            config["vocabulary"] = dict(tokenizer.vocabulary)
            config["merges"] = list(tokenizer.merges)
    return serialized


def _restore_vocabularies(serialized):
    """A T5 tokenizer's SentencePiece model back to bytes (in place)."""
    for _, config in _tokenizer_configs(serialized):
        if "proto_base64" in config:
            config["proto"] = base64.b64decode(config.pop("proto_base64"))


def sd3_conditioning(backbone, preprocessor, dropout=0.0):
    """The frozen text conditioning of an SD3 backbone: embeddings of
    `SD3TextEncoder` (the pooled vector packed as a last token), once per
    caption; `dropout` the share of training captions replaced by the empty
    prompt."""
    encoder = SD3TextEncoder.of_backbone(backbone, preprocessor)
    return FrozenTextConditioning(encoder, dropout=dropout, pooled=True)
