"""An SD3 model of `from_keras_hub` back into keras-hub: `to_keras_hub`."""

import numpy as np
from keras import ops

from keras_diffusion.adapters import lora as lora_layers
from keras_diffusion.interop.keras_hub_sd3 import import_keras_hub
from keras_diffusion.interop.sd3_parts import SD3Denoiser
from keras_diffusion.utils.checks import check_bool

# The MMDiT's settings a new backbone is built with, by the backbone's
# argument (its VAE and text encoders are the model's own layers).
_MMDIT_SETTINGS = {
    "mmdit_patch_size": "patch_size",
    "mmdit_hidden_dim": "hidden_dim",
    "mmdit_num_layers": "num_layers",
    "mmdit_num_heads": "num_heads",
    "mmdit_position_size": "position_size",
    "mmdit_qk_norm": "qk_norm",
    "mmdit_dual_attention_indices": "dual_attention_indices",
}


def check_model(model):
    denoiser = getattr(model, "denoiser", None)
    if not isinstance(denoiser, SD3Denoiser):
        raise TypeError(
            "Argument `model` must be a DiffusionModel of "
            "keras_diffusion.from_keras_hub (an SD3 MMDiT denoiser). "
            f"Received: model with denoiser {type(denoiser).__name__}"
        )


def averaged_values(model, use_ema=True):
    """`{id(variable): value}` of the EMA's averages of the denoiser's
    trainable weights (LoRA's factors alone in a LoRA model) when `use_ema`
    and the model keeps an EMA, else `{}` (the live values)."""
    if not (use_ema and model.ema is not None):
        return {}
    variables = model.denoiser.trainable_variables
    values = model.ema.values()[: len(variables)]
    return {id(v): x for v, x in zip(variables, values, strict=True)}


def mmdit_values(model, use_ema=True):
    """The values of the model's MMDiT weights without LoRA, in the order of
    a plain MMDiT's `weights`: adapted kernels merged (`kernel + (alpha /
    rank) a b`), with the EMA's values when `use_ema` and the model keeps an
    EMA, else the live ones."""
    denoiser = model.denoiser
    averaged = averaged_values(model, use_ema)
    merged = lora_layers.merged_kernels(denoiser, averaged)
    base = [v for v in denoiser.mmdit.weights if not lora_layers.is_factor(v)]
    return [
        merged[id(v)]
        if id(v) in merged
        else ops.convert_to_numpy(averaged.get(id(v), v))
        for v in base
    ]


def to_keras_hub(model, use_ema=True):
    """A keras-hub `StableDiffusion3TextToImage` of a `from_keras_hub` model.

    Its MMDiT holds the model's weights (the EMA's when `use_ema` and the
    model keeps one), LoRA merged into plain kernels; its VAE, text
    encoders and preprocessor are the model's own (the same layers). Its
    `generate_step` from the same starting latents, prompts, steps and
    guidance gives our `generate`'s images (Euler, keras-hub's sampler),
    within float32 rounding.

    Args:
        model: a `DiffusionModel` of `keras_diffusion.from_keras_hub`.
        use_ema: bool. Defaults to `True`.

    Returns:
        A new `keras_hub.models.StableDiffusion3TextToImage`.
    """
    check_model(model)
    check_bool("use_ema", use_ema)
    keras_hub = import_keras_hub()
    text = model.conditioning.encoder
    mmdit = model.denoiser.mmdit.get_config()
    settings = {name: mmdit[key] for name, key in _MMDIT_SETTINGS.items()}
    schedule = model.schedule.get_config()
    exported = keras_hub.models.StableDiffusion3Backbone(
        vae=model.autoencoder.vae,
        clip_l=text.clip_l,
        clip_g=text.clip_g,
        t5=text.t5,
        latent_channels=model.autoencoder.latent_channels,
        num_train_timesteps=schedule["num_train_timesteps"],
        shift=schedule["shift"],
        image_shape=model.autoencoder.image_shape,
        dtype=model.denoiser.mmdit.dtype_policy,
        **settings,
    )
    for name in ("clip_l_projection", "clip_g_projection"):
        kernel = getattr(text, name).dense.kernel
        getattr(exported, name).dense.kernel.assign(kernel)
    values = mmdit_values(model, use_ema)
    for variable, value in zip(exported.diffuser.weights, values, strict=True):
        variable.assign(np.asarray(value))
    return keras_hub.models.StableDiffusion3TextToImage(exported, text.preprocessor)
