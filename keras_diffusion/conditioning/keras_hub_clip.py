"""keras-hub's CLIP text encoder, frozen, as a text model's encoder
(`FrozenTextConditioning`): from a preset name, or from given keras-hub
objects. keras-hub (the `keras-hub` extra) is imported when one is built,
never by `import keras_diffusion`.

A preset's encoder is saved by name: a `.keras` file records the preset and
rebuilds the encoder from it on load (keras-hub's download, cached), not its
weights (63 M to 693 M parameters). An encoder given as objects (a tiny
random one, one of your own) is saved whole: its config and weights go into
the file. Either way the file holds the tokenizer's vocabulary and merges.
"""

import os

import keras
from keras import ops

from keras_diffusion.conditioning.frozen import FrozenTextConditioning
from keras_diffusion.utils.configurable import deserialized

INSTALL = 'pip install ".[keras-hub]"'

# keras-hub's CLIP presets: each one's text encoder's width (the context's
# width, the U-Net's cross_attention_dim), layers and parameters, from the
# architectures (OpenAI's and OpenCLIP's; 77 tokens, a vocabulary of 49,408,
# a feed-forward 4x the width).
CLIP_PRESETS = {
    "clip_vit_base_patch16": (512, 12, "63 M"),
    "clip_vit_base_patch32": (512, 12, "63 M"),
    "clip_vit_large_patch14": (768, 12, "123 M"),
    "clip_vit_large_patch14_336": (768, 12, "123 M"),
    "clip_vit_b_32_laion2b_s34b_b79k": (512, 12, "63 M"),
    "clip_vit_h_14_laion2b_s32b_b79k": (1024, 24, "353 M"),
    "clip_vit_g_14_laion2b_s12b_b42k": (1024, 24, "353 M"),
    "clip_vit_bigg_14_laion2b_39b_b160k": (1280, 32, "693 M"),
}


def import_keras_hub(argument="text_encoder", received=None):
    """keras-hub, or a `ValueError` naming `argument` (its value
    `received`) and the extra to install."""
    try:
        import keras_hub
    except ImportError:
        raise ValueError(
            f"Argument `{argument}` needs keras-hub, which is not installed: "
            f"{INSTALL}. Received: {argument}={received!r}"
        ) from None
    return keras_hub


def check_preset(preset, argument="preset", received=None):
    """A keras-hub CLIP preset's name (`keras_hub.models.CLIPBackbone`'s)
    or a local preset folder; anything else is named in one line, with
    `received` (what was typed; `preset` where not given)."""
    received = preset if received is None else received
    keras_hub = import_keras_hub(argument, received)
    known = sorted(keras_hub.models.CLIPBackbone.presets)
    if isinstance(preset, str) and (preset in known or os.path.isdir(preset)):
        return preset
    raise ValueError(
        f"Argument `{argument}` must name a keras-hub CLIP preset "
        f"({', '.join(known)}) or a local preset folder. "
        f"Received: {argument}={received!r}"
    )


class _Untracked:
    """Holds keras-hub's parts out of Keras' sight: a preset's encoder is
    not saved in the file (its name is), and the preprocessor's string ops
    would turn XLA off for the model's step (Keras reads `supports_jit`)."""

    def __init__(self, text_encoder, preprocessor):
        self.text_encoder = text_encoder
        self.preprocessor = preprocessor


@keras.saving.register_keras_serializable(package="keras_diffusion")
class KerasHubCLIPEncoder(keras.layers.Layer):
    """keras-hub's CLIP text encoder, frozen: a batch of texts (a 1-D
    `tf.string` tensor) to its last layer's float32 `(batch,
    sequence_length, hidden_dim)`, every token's (the padding's too), as
    Stable Diffusion's U-Net attends to them. The encoder of a
    `FrozenTextConditioning` (`clip_conditioning` makes both).

    Args:
        preset: optional str, a keras-hub CLIP preset (`CLIP_PRESETS`:
            `"clip_vit_large_patch14"` is Stable Diffusion 1.x's text
            encoder) or a local preset folder: its `CLIPBackbone`'s text
            encoder and its `CLIPTokenizer`, downloaded by keras-hub on
            first use (the whole backbone, vision encoder included, is
            loaded, then only the text encoder kept). Saved by name.
        text_encoder: optional `keras_hub.models.CLIPTextEncoder`, in place
            of a preset (with `tokenizer`). Saved whole.
        tokenizer: optional `keras_hub.models.CLIPTokenizer` (or a
            `CLIPPreprocessor`, whose tokenizer is taken): with
            `text_encoder`, or in place of a preset's. Its vocabulary and
            merges are saved in the config either way (a preset's too: a
            file loaded in safe mode reads no file outside it).
        sequence_length: optional int, tokens a prompt, start and end
            tokens included (longer prompts are cut). Defaults to `None`:
            the text encoder's `max_sequence_length` (77 for the presets).

    Example:

    ```python
    encoder = KerasHubCLIPEncoder(preset="clip_vit_large_patch14")
    text = keras_diffusion.FrozenTextConditioning(encoder)  # width 768
    ```
    """

    def __init__(
        self,
        preset=None,
        text_encoder=None,
        tokenizer=None,
        sequence_length=None,
        **kwargs,
    ):
        kwargs.pop("trainable", None)
        super().__init__(**kwargs)
        keras_hub = import_keras_hub(
            "preset" if preset else "text_encoder", preset or text_encoder
        )
        if (preset is None) == (text_encoder is None) or (
            text_encoder is not None and tokenizer is None
        ):
            raise ValueError(
                "Pass `preset`, or `text_encoder` with `tokenizer`. "
                f"Received: preset={preset!r}, text_encoder={text_encoder!r}, "
                f"tokenizer={tokenizer!r}"
            )
        if preset is not None:
            check_preset(preset)
            backbone = keras_hub.models.CLIPBackbone.from_preset(preset)
            text_encoder = backbone.text_encoder
            if tokenizer is None:
                tokenizer = keras_hub.models.CLIPTokenizer.from_preset(preset)
        else:
            # Tracked: its weights go into the file.
            self.text_encoder = text_encoder
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        if sequence_length is None:
            sequence_length = text_encoder.max_sequence_length
        self.preset = preset
        self.sequence_length = int(sequence_length)
        preprocessor = keras_hub.models.CLIPPreprocessor(
            tokenizer, sequence_length=self.sequence_length
        )
        self._parts = _Untracked(text_encoder, preprocessor)
        text_encoder.trainable = False
        self.trainable = False
        self.built = True

    def call(self, texts):
        parts = self._parts
        token_ids = parts.preprocessor({"prompts": texts, "images": None})
        outputs = parts.text_encoder({"token_ids": token_ids["token_ids"]})
        if isinstance(outputs, dict):  # with an intermediate output
            outputs = outputs["sequence_output"]
        return ops.cast(outputs, "float32")

    def get_config(self):
        config = super().get_config()
        config.pop("trainable", None)
        tokenizer = self._parts.preprocessor.tokenizer
        config.update(
            {
                "sequence_length": self.sequence_length,
                # keras-hub keeps a tokenizer's vocabulary out of its config,
                # in files it reads by path, which a file loaded in safe mode
                # may not do: the file holds them (about 1.4 MB for CLIP's).
                "tokenizer": {
                    **tokenizer.get_config(),
                    "vocabulary": dict(tokenizer.vocabulary),
                    "merges": list(tokenizer.merges),
                },
            }
        )
        if self.preset is not None:
            config["preset"] = self.preset
        else:
            config["text_encoder"] = keras.saving.serialize_keras_object(
                self._parts.text_encoder
            )
        return config

    @classmethod
    def from_config(cls, config):
        keras_hub = import_keras_hub("preset", config.get("preset"))
        config = deserialized(config, "text_encoder")
        # Its options (`pad_with_end_token`), vocabulary and merges.
        config["tokenizer"] = keras_hub.models.CLIPTokenizer.from_config(
            config["tokenizer"]
        )
        return cls(**config)


def clip_conditioning(preset=None, dropout=0.1, **objects):
    """A `FrozenTextConditioning` over a `KerasHubCLIPEncoder` of `preset`
    (or of the keras-hub `objects`: `text_encoder`, `tokenizer`)."""
    return FrozenTextConditioning(
        KerasHubCLIPEncoder(preset=preset, **objects), dropout=dropout
    )
