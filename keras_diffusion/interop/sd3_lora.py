"""An SD3 LoRA of `from_keras_hub` out to diffusers: the PEFT keys of
diffusers' `SD3Transformer2DModel` in `pytorch_lora_weights.safetensors`,
the file `StableDiffusion3Pipeline.load_lora_weights` reads.

keras-hub's MMDiT fuses each stream's query, key and value into one Dense
(`attention_qkv`, width 3 * hidden, in that order: keras-hub's and SD3's
own `qkv`); diffusers keeps them apart (`to_q`, `to_k`, `to_v` for the
image stream `x`, `add_q_proj`, `add_k_proj`, `add_v_proj` for the text
stream `context`). A rank-r LoRA `kernel + s a b` of the fused layer is
three LoRAs sharing `a`, each with its third of `b`'s columns: exact. The
scale `s = alpha / rank` is folded into `lora_B` (diffusers reads a file
without alphas at scale 1).
"""

import os

import numpy as np
from keras import ops

from keras_diffusion.adapters import lora as lora_layers
from keras_diffusion.interop import weights
from keras_diffusion.interop.keras_hub_export import averaged_values, check_model
from keras_diffusion.utils.checks import check_bool

LORA_FILE = "pytorch_lora_weights.safetensors"
PREFIX = "transformer.transformer_blocks"
# A joint block's keras-hub layers (attribute paths of each stream) and the
# diffusers modules of `transformer_blocks.{i}` they become; a fused qkv
# becomes three. SD3.5's second attention (`attention_qkv2`) is the image
# stream's `attn2`; the last block's text stream has no projection or MLP.
_STREAMS = {
    "x_block": {
        "attention_qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
        "attention_proj": ("attn.to_out.0",),
        "attention_qkv2": ("attn2.to_q", "attn2.to_k", "attn2.to_v"),
        "attention_proj2": ("attn2.to_out.0",),
        "mlp.dense1": ("ff.net.0.proj",),
        "mlp.dense2": ("ff.net.2",),
    },
    "context_block": {
        "attention_qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"),
        "attention_proj": ("attn.to_add_out",),
        "mlp.dense1": ("ff_context.net.0.proj",),
        "mlp.dense2": ("ff_context.net.2",),
    },
}


def _sublayer(layer, path):
    for name in path.split("."):
        layer = getattr(layer, name, None)
    return layer


def _factors(layer, values):
    """PEFT's `(lora_A, lora_B)` of an adapted Dense: `(a.T, (s b).T)`."""
    a, b = (
        np.asarray(ops.convert_to_numpy(values.get(id(v), v)), "float32")
        for v in (layer.lora_kernel_a, layer.lora_kernel_b)
    )
    scale = layer.lora_alpha / layer.lora_rank
    return a.T, (scale * b).T


def lora_tensors(model, use_ema=True):
    """`{PEFT key: float32 array}` of the model's LoRA factors (the EMA's
    when `use_ema` and the model keeps one), keyed as diffusers'
    `SD3Transformer2DModel`.

    Raises:
        ValueError: naming an adapted layer diffusers has no module for, or
            when the model has no LoRA.
    """
    values = averaged_values(model, use_ema)
    tensors, mapped = {}, set()
    for i, block in enumerate(model.denoiser.mmdit.joint_blocks):
        for stream, modules in _STREAMS.items():
            for path, names in modules.items():
                layer = _sublayer(getattr(block, stream), path)
                if not getattr(layer, "lora_enabled", False):
                    continue
                mapped.add(id(layer))
                lora_a, lora_b = _factors(layer, values)
                for name, part in zip(names, np.split(lora_b, len(names)), strict=True):
                    key = f"{PREFIX}.{i}.{name}"
                    tensors[f"{key}.lora_A.weight"] = np.ascontiguousarray(lora_a)
                    tensors[f"{key}.lora_B.weight"] = np.ascontiguousarray(part)
    layers = lora_layers.adaptable_layers(model.denoiser)
    unmapped = [
        path
        for path, layer in layers.items()
        if getattr(layer, "lora_enabled", False) and id(layer) not in mapped
    ]
    if unmapped:
        raise ValueError(
            "diffusers' SD3Transformer2DModel has no module for the adapted "
            f"layers {unmapped[:3]}: only the joint blocks' attention and MLP "
            "layers export. Received: a LoRA on those layers"
        )
    if not tensors:
        raise ValueError(
            "to_diffusers of an SD3 model writes its LoRA alone "
            f"({LORA_FILE}), and this model has none: build it with "
            "from_keras_hub(..., lora_rank=R) (a full SD3Transformer2DModel "
            "export is not built). Received: a model without LoRA"
        )
    return tensors


def write_lora(model, folder, use_ema=True, verbose=1):
    """Writes `folder/pytorch_lora_weights.safetensors`, the model's LoRA as
    diffusers' PEFT keys of `SD3Transformer2DModel` (`lora_tensors`), for
    `StableDiffusion3Pipeline.load_lora_weights(folder)`. Everything is
    checked and converted before the file is written.

    Returns:
        the folder.
    """
    check_model(model)
    check_bool("use_ema", use_ema)
    tensors = lora_tensors(model, use_ema)
    folder = os.fspath(folder)
    weights.write_safetensors(tensors, os.path.join(folder, LORA_FILE))
    if verbose:
        print(
            f"Wrote the SD3 LoRA to {os.path.join(folder, LORA_FILE)!r}: "
            f"diffusers.StableDiffusion3Pipeline.load_lora_weights({folder!r}).",
            flush=True,
        )
    return folder
