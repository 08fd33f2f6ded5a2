"""Low-rank adaptation (LoRA) of a denoiser's layers, on Keras' own.

Keras gives `Dense`, `EinsumDense` and the convolutions `enable_lora(rank)`:
the layer's kernel is frozen and the layer computes with `kernel + (alpha /
rank) a b`, where `a` (random) and `b` (zeros) are the only new weights.
Here that is applied to a denoiser (the U-Net's convolutions, dense layers
and attention projections, or those whose path matches a pattern), every
other weight is frozen (biases and normalisations included, as PEFT's
default), and the adapted layers save their base kernel and both factors
apart: Keras saves the merged kernel and loads it with both factors zeroed,
which would leave an adapter that cannot train again (see
`keras_diffusion.utils.keras_internals.lora_base_kernel`).

A `DiffusionModel` keeps its LoRA settings in its config (`lora`), so that a
`.keras` file or a backup rebuilds the same adapter around the same frozen
weights. Inside `base_kernels_by_checksum()` (a run's step backups) an
adapted layer writes its factors and a CRC-32 of its base kernel and bias
instead of them: a resumed run rebuilds those from its source (the
`--init-from` checkpoint, or the seeded initialisation), and the checksum
refuses a source that changed since.
"""

import contextlib
import fnmatch
import zlib

import numpy as np
from keras import ops

from keras_diffusion.layers import attention_block, residual_block
from keras_diffusion.utils import keras_internals
from keras_diffusion.utils.checks import check_float, check_int

FACTORS = ("lora_kernel_a", "lora_kernel_b")
# The store keys of an adapted layer's base kernel and bias (Keras' own), and
# of their CRC-32 in a backup.
_BASE = ("0", "1")
CHECKSUM = "base_crc32"
# Inside `base_kernels_by_checksum`, the paths of the layers whose base did
# not match its checksum on load; `None` outside.
_by_checksum = [None]
# The names the blocks give their sublayers, and the class part of the
# numbered names Keras gave them in earlier releases (`conv_1`: `conv2d`).
_EARLIER_NAMES = {**residual_block.EARLIER_NAMES, **attention_block.EARLIER_NAMES}


@contextlib.contextmanager
def base_kernels_by_checksum():
    """Inside, the adapted layers' `save_own_variables` write both factors
    and a CRC-32 of the base kernel and bias, not those (the most of a LoRA
    model's weights); loading such weights keeps the layer's base and
    checks it against the checksum.

    Yields:
        A list, filled on load with the paths of the layers whose base
        differs from the saved checksum; pass it to `check_base_unchanged`
        after the load (Keras' loader would replace an error raised inside
        with one of its own).
    """
    previous = _by_checksum[0]
    _by_checksum[0] = mismatched = []
    try:
        yield mismatched
    finally:
        _by_checksum[0] = previous


def check_base_unchanged(mismatched):
    """Raises unless `mismatched` (from `base_kernels_by_checksum`) is empty."""
    if mismatched:
        raise ValueError(
            f"The saved weights of the LoRA layers {mismatched[:3]} hold their "
            "factors only, and were trained around other base weights than "
            "the model holds now (their CRC-32 differs): the base model "
            "changed since they were saved (a --init-from checkpoint "
            "overwritten?). Pass --overwrite to start the run again."
        )


def _checksum(variables):
    crc = 0
    for variable in variables:
        value = np.ascontiguousarray(ops.convert_to_numpy(variable))
        crc = zlib.crc32(value.tobytes(), crc)
    return np.asarray([crc], dtype="int64")


def check_lora(name, value):
    """`value` as `{"rank", "alpha", "layers"}` (or `None`), or raises
    naming `name`."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"rank", "alpha", "layers"}:
        raise ValueError(
            f"Argument `{name}` must be a dict with keys 'rank', 'alpha' and "
            f"'layers'. Received: {name}={value!r}"
        )
    return check_settings(
        value.get("rank"), value.get("alpha"), value.get("layers"), prefix=name
    )


def check_settings(rank, alpha=None, layers=None, prefix=None):
    """`{"rank", "alpha", "layers"}` checked, or raises naming each argument
    (`rank`, or `lora['rank']` with `prefix="lora"`)."""

    def named(key):
        return key if prefix is None else f"{prefix}['{key}']"

    rank = check_int(named("rank"), rank, 1)
    if alpha is not None:
        alpha = check_float(named("alpha"), alpha, greater_than=0.0)
    if layers is not None:
        if isinstance(layers, str) or not all(isinstance(p, str) for p in layers):
            raise TypeError(
                f"Argument `{named('layers')}` must be a list of name patterns "
                f"(fnmatch, e.g. '*attn*'). Received: {named('layers')}={layers!r}"
            )
        layers = list(layers)
    return {"rank": rank, "alpha": rank if alpha is None else alpha, "layers": layers}


def adaptable_layers(denoiser):
    """`{path: layer}` of the layers LoRA applies to, in Keras' order; a
    layer's path is its kernel's without `/kernel` (for the U-Net, e.g.
    `mid_attn/attention/query` or `down_0_res_0/conv_1`), the same in every
    build of the same U-Net."""
    found = {}
    for layer in keras_internals.sublayers(denoiser):
        if not (hasattr(layer, "enable_lora") and hasattr(layer, "kernel")):
            continue
        if not layer.built:
            continue
        found[layer_path(layer)] = layer
    return found


def layer_path(layer):
    """The path of an adaptable `layer`: its kernel's without `/kernel`."""
    if getattr(layer, "lora_enabled", False):
        kernel = keras_internals.lora_base_kernel(layer)
    else:
        kernel = layer.kernel
    return kernel.path.rsplit("/", 1)[0]


def _earlier_path(path):
    """`path` as an earlier release named it, each of a block's sublayers by
    Keras' class name (`down_0_res_0/conv2d`), without the number that
    changed from build to build."""
    top, *rest = path.split("/")
    return "/".join([top] + [_EARLIER_NAMES.get(name, name) for name in rest])


def _matches(path, pattern):
    return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(
        _earlier_path(path), pattern
    )


def select(denoiser, layers=None):
    """The adaptable layers of `denoiser` whose path matches a pattern of
    `layers` (all when `None`), as `{path: layer}`. A pattern also matches
    a path as earlier releases named it (`*conv2d*`, `*multi_head_attention*`:
    Keras' class names), so that their models load with the same adapters.

    Raises:
        ValueError: a pattern matches no layer, or none is adaptable.
    """
    found = adaptable_layers(denoiser)
    if not found:
        raise ValueError(
            f"The denoiser {denoiser.name!r} has no layer LoRA applies to "
            "(Dense, EinsumDense or a convolution)."
        )
    if layers is None:
        return found
    for pattern in layers:
        if not any(_matches(path, pattern) for path in found):
            some = ", ".join(list(found)[:6])
            raise ValueError(
                f"The LoRA layer pattern {pattern!r} matches no layer of the "
                f"denoiser; paths look like: {some}. Received: layers={layers!r}"
            )
    return {
        path: layer
        for path, layer in found.items()
        if any(_matches(path, pattern) for pattern in layers)
    }


def apply(denoiser, rank, alpha, layers=None):
    """Adapts the selected layers of `denoiser` (those not already adapted,
    e.g. by their own config) and freezes every other weight.

    Returns:
        `{path: layer}` of the adapted layers.
    """
    chosen = select(denoiser, layers)
    for path, layer in chosen.items():
        if getattr(layer, "lora_enabled", False):
            if layer.lora_rank != rank:
                raise ValueError(
                    f"The layer {path!r} already has LoRA of rank "
                    f"{layer.lora_rank}. Received: rank={rank}"
                )
        else:
            layer.enable_lora(rank, lora_alpha=alpha)
        _keep_factors_apart(layer)
    factors = {
        id(getattr(layer, name)) for layer in chosen.values() for name in FACTORS
    }
    for variable in denoiser.weights:
        variable.trainable = id(variable) in factors
    return chosen


def _keep_factors_apart(layer):
    """Makes `layer` save (and load) its base kernel, bias and both factors,
    not the merged kernel: `.keras` files and backups then rebuild the
    adapter exactly (backups: the factors, and the base by checksum)."""

    def save_own_variables(store):
        stored = _stored(layer)
        if _by_checksum[0] is not None:
            base = [stored.pop(key) for key in _BASE if key in stored]
            store[CHECKSUM] = _checksum(base)
        for key, variable in stored.items():
            store[key] = variable

    def load_own_variables(store):
        stored = _stored(layer)
        keys = set(store.keys())
        required = {"0"}
        if CHECKSUM in keys:  # saved by `base_kernels_by_checksum`
            _check_base(layer, store[CHECKSUM], stored)
            keys.discard(CHECKSUM)
            required = set(FACTORS)
            stored = {key: stored[key] for key in FACTORS}
        if not required <= keys <= set(stored):
            raise ValueError(
                f"The saved weights of the LoRA layer {layer_path(layer)!r} hold "
                f"{sorted(keys)}; expected {sorted(stored)}"
            )
        for key in sorted(keys):
            stored[key].assign(store[key])
        if FACTORS[0] not in keys:
            # A file of Keras' own (merged kernel): the adapter starts over,
            # `b` zero so that the layer computes what was saved.
            layer.lora_kernel_b.assign(ops.zeros(layer.lora_kernel_b.shape))

    layer.save_own_variables = save_own_variables
    layer.load_own_variables = load_own_variables


def _check_base(layer, saved, stored):
    """Notes (or, outside `base_kernels_by_checksum`, raises) a base kernel
    and bias of `layer` whose CRC-32 is not `saved`."""
    saved = int(np.asarray(saved).reshape(-1)[0])
    if saved == int(_checksum([stored[k] for k in _BASE if k in stored])[0]):
        return
    if _by_checksum[0] is None:
        check_base_unchanged([layer_path(layer)])
    _by_checksum[0].append(layer_path(layer))


def _stored(layer):
    stored = {"0": keras_internals.lora_base_kernel(layer)}
    if getattr(layer, "bias", None) is not None:
        stored["1"] = layer.bias
    for name in FACTORS:
        stored[name] = getattr(layer, name)
    return stored


def merged_kernels(denoiser, values=None):
    """`{id(base kernel): merged kernel}` of every adapted layer, with the
    factors' `values` (`{id(factor): value}`, e.g. the EMA's) where given,
    else their live values."""
    values = values or {}
    merged = {}
    for layer in adaptable_layers(denoiser).values():
        if not getattr(layer, "lora_enabled", False):
            continue
        a, b = (
            values.get(id(v), v) for v in (layer.lora_kernel_a, layer.lora_kernel_b)
        )
        base = keras_internals.lora_base_kernel(layer)
        delta = ops.matmul(ops.convert_to_tensor(a), ops.convert_to_tensor(b))
        scale = layer.lora_alpha / layer.lora_rank
        merged[id(base)] = ops.convert_to_numpy(base + scale * delta)
    return merged


def is_factor(variable):
    return variable.name in FACTORS
