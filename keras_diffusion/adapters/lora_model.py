"""LoRA on a whole `DiffusionModel`: `enable_lora` and `merge_lora`.

`enable_lora` returns a new model whose denoiser trains low-rank adapters
and nothing else (`keras_diffusion.adapters.lora`), around the weights of the
model given; `merge_lora` folds the adapters back into plain kernels, for
an export (`to_diffusers`) or a model without LoRA.
"""

import keras
import numpy as np

from keras_diffusion.adapters import lora as lora_layers


def enable_lora(model, rank, alpha=None, layers=None):
    """A copy of `model` that trains low-rank adapters of its denoiser only.

    Every `Dense`, `EinsumDense` and convolution of the denoiser (for the
    U-Net: its convolutions, dense layers and attention projections), or
    those whose path matches a pattern of `layers` (or of the denoiser's
    own `lora_targets`, when it declares them and `layers` is not given:
    SD3's MMDiT its attention projections), computes with
    `kernel + (alpha / rank) a b`. Only `a` (random) and `b` (zeros, so the
    copy starts as `model`'s live weights) train; every other weight stays
    as it is, bit for bit. The copy's EMA and post-hoc profiles average the
    factors. `.keras` files and backups keep the base weights and the
    factors apart, and load into a model that trains on.

    Args:
        model: a `DiffusionModel`, not compiled by the copy (compile the
            copy).
        rank: int >= 1.
        alpha: optional positive float: the factors are scaled by
            `alpha / rank`. Defaults to `rank`.
        layers: optional list of fnmatch patterns matched against each
            layer's path (its kernel's path without `/kernel`, the same
            from load to load: for the U-Net e.g. `"down_1_res_0/conv_1"`,
            `"mid_attn/attention/query"`, or `"*attn*"` for every attention
            projection; `keras_diffusion.adapters.lora.adaptable_layers` lists
            them). Earlier releases' paths, with Keras' class names
            (`"*conv2d*"`, `"*multi_head_attention*"`), match too. Defaults
            to the denoiser's `lora_targets`, else all.

    Returns:
        A new `DiffusionModel`, built from `model`'s config: a second copy
        of its weights in memory (for `from_keras_hub`'s SD3, a second MMDiT
        that no longer shares its weights with the keras-hub backbone:
        `from_keras_hub(..., lora_rank=R)` adapts the backbone's own).

    Raises:
        TypeError: `model` is not a `DiffusionModel`.
        ValueError: a bad rank, alpha or pattern, or `model` has LoRA
            already.
    """
    _check_model(model)
    if layers is None:
        layers = getattr(model.denoiser, "lora_targets", None)
    lora = lora_layers.check_settings(rank, alpha, layers)
    if model.lora is not None:
        raise ValueError(
            f"The model has LoRA already ({model.lora}); merge it first "
            f"(`keras_diffusion.merge_lora`). Received: rank={rank!r}"
        )
    lora_layers.select(model.denoiser, lora["layers"])  # before anything is built
    config = model.get_config()
    config["lora"] = lora
    copy = type(model).from_config(config)
    base = [v for v in copy.denoiser.weights if not lora_layers.is_factor(v)]
    for target, variable in zip(base, model.denoiser.weights, strict=True):
        target.assign(variable)
    _copy_conditioning(model, copy)
    for average in (copy.ema, copy.power_ema):
        if average is not None:
            average.reset(copy.denoiser.trainable_variables)
    return copy


def merge_lora(model, use_ema=True):
    """A copy of a LoRA `model` (`enable_lora`) without adapters: each
    adapted kernel becomes `kernel + (alpha / rank) a b`, with the EMA's
    factors when `use_ema` and the model keeps an EMA, else the live ones.
    The copy's live weights and EMA both hold the merged weights, so that
    it samples as `model` does; it keeps no post-hoc profiles.

    Raises:
        TypeError: `model` is not a `DiffusionModel`.
        ValueError: `model` has no LoRA, or its denoiser's own config
            enables LoRA (a functional model saved with `lora_rank`).
    """
    _check_model(model)
    if model.lora is None:
        raise ValueError("The model has no LoRA to merge (`enable_lora`).")
    factor_values = {}
    if use_ema and model.ema is not None:
        variables = model.denoiser.trainable_variables
        values = model.ema.values()
        factor_values = {id(v): x for v, x in zip(variables, values, strict=True)}
    merged = lora_layers.merged_kernels(model.denoiser, factor_values)
    config = model.get_config()
    config.pop("lora")
    config.pop("posthoc_ema", None)
    if isinstance(config.get("conditioning"), dict):
        # LoRA froze a text encoder with the base; the merged model trains it.
        config["conditioning"]["config"]["trainable"] = True
    copy = type(model).from_config(config)
    if any(
        getattr(layer, "lora_enabled", False)
        for layer in lora_layers.adaptable_layers(copy.denoiser).values()
    ):
        raise ValueError(
            "The denoiser's own config enables LoRA on some layers, so it "
            "cannot be rebuilt without it; merge those layers yourself."
        )
    base = [v for v in model.denoiser.weights if not lora_layers.is_factor(v)]
    for target, variable in zip(copy.denoiser.weights, base, strict=True):
        target.assign(merged.get(id(variable), np.asarray(variable)))
    _copy_conditioning(model, copy)
    if copy.ema is not None:
        copy.ema.reset(copy.averaged_variables)
    return copy


def _copy_conditioning(model, copy):
    """The weights of `model`'s text encoder (frozen under LoRA, as the
    base) onto `copy`'s; class labels have none."""
    source = getattr(getattr(model, "conditioning", None), "weights", None)
    if source:
        for target, variable in zip(copy.conditioning.weights, source, strict=True):
            target.assign(variable)


def _check_model(model):
    # adapters/ sits beside models/ and imports none of it (DiffusionModel
    # builds its adapter with `lora`): a DiffusionModel is known by the
    # attributes read here, its denoiser and its LoRA settings.
    is_diffusion_model = isinstance(model, keras.Model) and all(
        hasattr(model, name) for name in ("denoiser", "lora", "ema", "power_ema")
    )
    if not is_diffusion_model:
        raise TypeError(
            "Argument `model` must be a keras_diffusion.DiffusionModel. "
            f"Received: model={type(model).__name__}"
        )
