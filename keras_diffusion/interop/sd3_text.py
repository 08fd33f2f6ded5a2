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
encoder. The encoders are keras-hub's own, outside the model's weights (not
trained, not averaged, not in a `.keras` file).
"""

import tensorflow as tf

from keras_diffusion.conditioning import FrozenTextConditioning

_NO_CONFIG = (
    "A model of keras_diffusion.from_keras_hub has no config yet: its text "
    "encoders are keras-hub's, outside the model's weights, so it does not "
    "save to a .keras file nor rebuild (enable_lora, merge_lora). Set LoRA "
    "with from_keras_hub(lora_rank=...) and export with "
    "keras_diffusion.to_keras_hub."
)


class SD3TextEncoder:
    """The text encoders of a keras-hub `StableDiffusion3Backbone` as a
    `FrozenTextConditioning` encoder: a batch of texts to `(context,
    pooled)`, by keras-hub's own `encode_text_step` (the embeddings its
    `generate` computes; its negative branch is given one text only).

    Args:
        backbone: a keras-hub `StableDiffusion3Backbone`.
        preprocessor: its `StableDiffusion3TextToImagePreprocessor`.

    Attributes:
        calls: int, the encoder calls made (each on captions not seen yet).
    """

    def __init__(self, backbone, preprocessor):
        self.backbone = backbone
        self.preprocessor = preprocessor
        self.calls = 0

    @property
    def pooled_width(self):
        return int(self.backbone.clip_hidden_dim)

    def __call__(self, texts):
        self.calls += 1
        token_ids = self.preprocessor.generate_preprocess(tf.constant(texts))
        negative = {name: ids[:1] for name, ids in token_ids.items()}
        context, _, pooled, _ = self.backbone.encode_text_step(token_ids, negative)
        return context, pooled

    def get_config(self):
        # What a `.keras` file, `enable_lora` and `merge_lora` rebuild a
        # model from.
        raise NotImplementedError(_NO_CONFIG)


def sd3_conditioning(backbone, preprocessor, dropout=0.0):
    """The frozen text conditioning of an SD3 backbone: embeddings of
    `SD3TextEncoder` (the pooled vector packed as a last token), once per
    caption; `dropout` the share of training captions replaced by the empty
    prompt."""
    encoder = SD3TextEncoder(backbone, preprocessor)
    return FrozenTextConditioning(encoder, dropout=dropout, pooled=True)
