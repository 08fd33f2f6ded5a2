"""`UNet` variables <-> diffusers `UNet2DModel` (or, with cross-attention,
`UNet2DConditionModel`) tensors, and safetensors I/O.

Each Keras variable of a `keras_diffusion.UNet` has one diffusers name and a
layout rule: convolution kernels are `(kh, kw, in, out)` here and
`(out, in, kh, kw)` in torch, dense kernels are transposed, and the
attention projections, `(in, heads, head_dim)` here, are `(heads * head_dim,
in)` there. As in keras-hub's `utils/transformers` converters, a port
assigns every Keras variable exactly once from a tensor that is read exactly
once, and names what is left over otherwise.
"""

import json
import os

import numpy as np

from keras_diffusion.layers import TransformerBlock

# diffusers renames these at load time (`_convert_deprecated_attention_blocks`).
_LEGACY_ATTENTION_NAMES = {
    "query": "to_q",
    "key": "to_k",
    "value": "to_v",
    "proj_attn": "to_out.0",
}
_ATTENTION_PROJECTIONS = {
    "query": "to_q",
    "key": "to_k",
    "value": "to_v",
    "attention_output": "to_out.0",
}


class _Entry:
    """One variable: its diffusers key, layout rule and torch shape."""

    def __init__(self, variable, key, kind):
        self.variable = variable
        self.key = key
        self.kind = kind
        shape = tuple(variable.shape)
        if kind == "conv":
            self.torch_shape = (shape[3], shape[2], shape[0], shape[1])
        elif kind == "dense":
            self.torch_shape = (shape[-1], int(np.prod(shape[:-1])))
        elif kind == "query":  # (in, heads, head_dim)
            self.torch_shape = (int(np.prod(shape[1:])), shape[0])
        else:  # vectors, embeddings; attention biases flatten
            self.torch_shape = (int(np.prod(shape)),) if len(shape) > 1 else shape
            if kind == "embedding":
                self.torch_shape = shape

    def to_keras(self, tensor):
        tensor = np.asarray(tensor, dtype=np.float32)
        if self.kind == "conv":
            tensor = tensor.transpose(2, 3, 1, 0)
        elif self.kind in ("dense", "query"):
            tensor = tensor.T
        return tensor.reshape(tuple(self.variable.shape))

    def to_torch(self, value):
        value = np.asarray(value, dtype=np.float32)
        if self.kind == "conv":
            return np.ascontiguousarray(value.transpose(3, 2, 0, 1))
        if self.kind == "dense":
            return np.ascontiguousarray(value.reshape(-1, value.shape[-1]).T)
        if self.kind == "query":
            return np.ascontiguousarray(value.reshape(value.shape[0], -1).T)
        return np.ascontiguousarray(value.reshape(self.torch_shape))


def _layer(unet, name):
    return unet.get_layer(name) if name in _layer_names(unet) else None


def _layer_names(unet):
    return {layer.name for layer in unet.layers}


def _conv(layer, prefix, kind="conv"):
    return [
        _Entry(layer.kernel, f"{prefix}.weight", kind),
        _Entry(layer.bias, f"{prefix}.bias", "vector"),
    ]


def _norm(layer, prefix):
    return [
        _Entry(layer.gamma, f"{prefix}.weight", "vector"),
        _Entry(layer.beta, f"{prefix}.bias", "vector"),
    ]


def _residual(block, prefix):
    entries = _norm(block.norm1, f"{prefix}.norm1")
    entries += _conv(block.conv1, f"{prefix}.conv1")
    entries += _conv(block.emb_proj, f"{prefix}.time_emb_proj", "dense")
    entries += _norm(block.norm2, f"{prefix}.norm2")
    entries += _conv(block.conv2, f"{prefix}.conv2")
    if block.skip is not None:
        entries += _conv(block.skip, f"{prefix}.conv_shortcut")
    return entries


def _attention(block, prefix):
    entries = _norm(block.norm, f"{prefix}.group_norm") if block.norm else []
    for variable in block.attention.weights:
        projection, kind = variable.path.split("/")[-2:]
        name = f"{prefix}.{_ATTENTION_PROJECTIONS[projection]}"
        if kind == "kernel":
            rule = "dense" if projection == "attention_output" else "query"
            entries.append(_Entry(variable, f"{name}.weight", rule))
        else:
            entries.append(_Entry(variable, f"{name}.bias", "vector"))
    return entries


def _transformer(block, prefix):
    """A `TransformerBlock` as diffusers' `Transformer2DModel` of one
    `BasicTransformerBlock`."""
    inner = f"{prefix}.transformer_blocks.0"
    entries = _norm(block.norm, f"{prefix}.norm") + _conv(
        block.proj_in, f"{prefix}.proj_in"
    )
    for i in (1, 2):
        entries += _norm(getattr(block, f"norm_{i}"), f"{inner}.norm{i}")
        attention = getattr(block, f"attn_{i}")
        for name in ("to_q", "to_k", "to_v"):
            kernel = getattr(attention, name).kernel
            entries.append(_Entry(kernel, f"{inner}.attn{i}.{name}.weight", "dense"))
        entries += _conv(attention.to_out, f"{inner}.attn{i}.to_out.0", "dense")
    entries += _norm(block.norm_3, f"{inner}.norm3")
    entries += _conv(block.ff_in, f"{inner}.ff.net.0.proj", "dense")
    entries += _conv(block.ff_out, f"{inner}.ff.net.2", "dense")
    return entries + _conv(block.proj_out, f"{prefix}.proj_out")


def _attention_entries(block, prefix):
    if isinstance(block, TransformerBlock):
        return _transformer(block, prefix)
    return _attention(block, prefix)


# A level's resampling convolution: its layer's name and diffusers key.
_RESAMPLERS = {
    "down": ("downsample", "downsamplers"),
    "up": ("upsample_conv", "upsamplers"),
}


def _level(unet, direction, level, prefix, num_blocks):
    """The `direction` (`"down"`, `"up"`) level `level` as the diffusers
    block `prefix`: its residual blocks, each with its attention where it
    has one, then its resampling convolution where it has one."""
    name = f"{direction}_{level}"
    entries = []
    for i in range(num_blocks):
        block = unet.get_layer(f"{name}_res_{i}")
        entries += _residual(block, f"{prefix}.resnets.{i}")
        attention = _layer(unet, f"{name}_attn_{i}")
        if attention is not None:
            entries += _attention_entries(attention, f"{prefix}.attentions.{i}")
    layer, key = _RESAMPLERS[direction]
    resample = _layer(unet, f"{name}_{layer}")
    if resample is not None:
        entries += _conv(resample, f"{prefix}.{key}.0.conv")
    return entries


def weight_map(unet):
    """Every variable of a `UNet` with its diffusers name, in model order.

    Args:
        unet: a `keras_diffusion.UNet`.

    Returns:
        list of entries with `variable`, `key`, `to_keras` and `to_torch`.
    """
    levels = len(unet.widths)
    entries = _conv(unet.get_layer("stem"), "conv_in")
    entries += _conv(unet.get_layer("t_mlp_1"), "time_embedding.linear_1", "dense")
    entries += _conv(unet.get_layer("t_mlp_2"), "time_embedding.linear_2", "dense")
    if unet.num_classes is not None:
        embedding = unet.get_layer("label_embedding").embeddings
        entries.append(_Entry(embedding, "class_embedding.weight", "embedding"))
    if getattr(unet, "cross_attention_dim", None) is not None:
        # The pooled context's projection: `class_embed_type="projection"`.
        for i in (1, 2):
            layer = unet.get_layer(f"context_mlp_{i}")
            entries += _conv(layer, f"class_embedding.linear_{i}", "dense")
    for level in range(levels):
        prefix = f"down_blocks.{level}"
        entries += _level(unet, "down", level, prefix, unet.num_res_blocks)
    if unet.mid_block:
        entries += _residual(unet.get_layer("mid_res_0"), "mid_block.resnets.0")
        if unet.mid_attention:
            attention = unet.get_layer("mid_attn")
            entries += _attention_entries(attention, "mid_block.attentions.0")
        entries += _residual(unet.get_layer("mid_res_1"), "mid_block.resnets.1")
    for level in reversed(range(levels)):
        prefix = f"up_blocks.{levels - 1 - level}"
        entries += _level(unet, "up", level, prefix, unet.num_res_blocks + 1)
    entries += _norm(unet.get_layer("out_norm"), "conv_norm_out")
    entries += _conv(unet.get_layer("out_conv"), "conv_out")
    return entries


def rename_legacy_keys(tensors):
    """Maps the attention names of old checkpoints onto today's."""
    renamed = {}
    for key, value in tensors.items():
        parts = key.split(".")
        if len(parts) >= 3 and parts[-2] in _LEGACY_ATTENTION_NAMES:
            parts[-2] = _LEGACY_ATTENTION_NAMES[parts[-2]]
            key = ".".join(parts)
        renamed[key] = value
    return renamed


def port_weights(unet, tensors, source):
    """Converts `tensors` (diffusers names) into values for `unet`.

    Nothing is assigned unless every variable has exactly one tensor of the
    right shape and every tensor is used, so a failed port leaves `unet`
    untouched.

    Args:
        unet: a `keras_diffusion.UNet`.
        tensors: dict of diffusers name -> NumPy array.
        source: str, what the tensors came from, for the messages.
    """
    tensors = rename_legacy_keys(tensors)
    entries = weight_map(unet)
    mapped = {id(entry.variable) for entry in entries}
    unmapped = [v.path for v in unet.weights if id(v) not in mapped]
    if unmapped or len(mapped) != len(entries):
        raise ValueError(
            f"Internal weight map of {type(unet).__name__} is incomplete: "
            f"unassigned variables {unmapped}"
        )
    missing = [entry.key for entry in entries if entry.key not in tensors]
    unused = sorted(set(tensors) - {entry.key for entry in entries})
    if missing or unused:
        raise ValueError(
            f"The weights of {source} do not match its config: missing "
            f"{_short(missing)}; unused {_short(unused)}"
        )
    values = []
    for entry in entries:
        tensor = tensors[entry.key]
        if tuple(tensor.shape) != tuple(entry.torch_shape):
            raise ValueError(
                f"Weight {entry.key!r} of {source} has shape {tuple(tensor.shape)}; "
                f"the config implies {tuple(entry.torch_shape)}"
            )
        values.append(entry.to_keras(tensor))
    for entry, value in zip(entries, values, strict=True):
        entry.variable.assign(value)


def export_weights(unet, values=None):
    """diffusers-named float32 tensors of `unet` (or of `values`, a dict of
    variable id -> array such as the EMA averages)."""
    values = values or {}
    return {
        entry.key: entry.to_torch(values.get(id(entry.variable), entry.variable))
        for entry in weight_map(unet)
    }


def _short(names, limit=6):
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _bfloat16_tensor(path, key):
    # NumPy has no bfloat16: the tensor's bytes are the high halves of
    # float32s, read straight from the file at the offsets of its header.
    with open(path, "rb") as file:
        length = int.from_bytes(file.read(8), "little")
        info = json.loads(file.read(length))[key]
        start, end = info["data_offsets"]
        file.seek(8 + length + start)
        raw = np.frombuffer(file.read(end - start), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])


def read_safetensors(path):
    """Float32 NumPy tensors of a safetensors file (fp16 and bf16 cast).

    Raises:
        ValueError: naming the file when it is not a readable safetensors file.
    """
    from safetensors import SafetensorError, safe_open

    tensors = {}
    try:
        with safe_open(path, framework="np") as file:
            for key in file.keys():
                if file.get_slice(key).get_dtype() == "BF16":
                    tensors[key] = _bfloat16_tensor(path, key)
                else:
                    tensors[key] = file.get_tensor(key).astype(np.float32)
    except (SafetensorError, OSError, KeyError, ValueError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(
            f"Cannot read the safetensors file {path!r} (truncated or not "
            f"safetensors?): {message}"
        ) from None
    return tensors


def read_pickle(path):
    """Tensors of a pickled torch checkpoint; needs torch."""
    try:
        import torch
    except ImportError:
        raise ValueError(
            f"Reading the pickled checkpoint {path!r} with allow_pickle=True "
            "needs torch (pip install torch), or convert it to safetensors."
        ) from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {key: value.float().numpy() for key, value in state.items()}


def write_safetensors(tensors, path):
    from safetensors.numpy import save_file

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_file(tensors, path, metadata={"format": "pt"})
