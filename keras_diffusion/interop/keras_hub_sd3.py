"""keras-hub's Stable Diffusion 3 as a `DiffusionModel` that trains with `fit`.

keras-hub (an optional extra, imported on first use) ships SD3 for
inference only. `from_keras_hub` takes its backbone, text-to-image task or
preset and gives a `DiffusionModel` of its parts: the MMDiT as the denoiser
(`SD3Denoiser`), flow matching with the backbone's shift and SD3's
logit-normal training density (`FlowMatchSchedule`), the VAE as the latent
autoencoder (`SD3Autoencoder`) and the frozen text encoders as the condition
(`sd3_conditioning`, a `FrozenTextConditioning`: embeddings computed once
per caption).
"""

import keras

from keras_diffusion.interop.sd3_parts import (
    LORA_ATTENTION,
    LORA_MLP,
    SD3Autoencoder,
    SD3Denoiser,
)
from keras_diffusion.interop.sd3_text import sd3_conditioning
from keras_diffusion.models.diffusion_model import DiffusionModel
from keras_diffusion.samplers.euler import EulerSampler
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule
from keras_diffusion.utils.checks import check_bool, check_float, check_int

_INSTALL = (
    'pip install "keras-diffusion[keras-hub]" (from a checkout: '
    'pip install ".[keras-hub]")'
)
# keras-hub's SD3 `generate`: Euler over 28 steps, guidance 7.
DEFAULT_STEPS = 28
DEFAULT_GUIDANCE = 7.0
# The process SD3 learned: flow matching.
SCHEDULE = FlowMatchSchedule


def import_keras_hub():
    """keras-hub, imported on first use (an optional extra)."""
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(
            f"keras_diffusion.from_keras_hub needs keras-hub: {_INSTALL}. ({error})"
        ) from error
    return keras_hub


def _resolve(source, preprocessor, image_shape):
    """`(backbone, preprocessor)` of a backbone, a text-to-image task or a
    preset name."""
    keras_hub = import_keras_hub()
    models = keras_hub.models
    if isinstance(source, str):
        kwargs = {} if image_shape is None else {"image_shape": tuple(image_shape)}
        source = models.StableDiffusion3TextToImage.from_preset(source, **kwargs)
    if isinstance(source, models.StableDiffusion3TextToImage):
        preprocessor = preprocessor or source.preprocessor
        source = source.backbone
    if not isinstance(source, models.StableDiffusion3Backbone):
        raise TypeError(
            "Argument `source` must be a keras_hub StableDiffusion3Backbone, a "
            "StableDiffusion3TextToImage or a preset name. "
            f"Received: source={type(source).__name__}"
        )
    if preprocessor is None:
        raise ValueError(
            "A StableDiffusion3Backbone holds no tokenizers: pass "
            "`preprocessor=` (a StableDiffusion3TextToImagePreprocessor), or a "
            "StableDiffusion3TextToImage task. Received: preprocessor=None"
        )
    return source, preprocessor


def sd3_schedule(backbone):
    """SD3's process: flow matching with the backbone's `num_train_timesteps`
    and `shift` and SD3's logit-normal training density."""
    return SCHEDULE(
        num_train_timesteps=backbone.num_train_timesteps,
        shift=backbone.shift,
        timestep_sampling="logit_normal",
    )


def sd3_autoencoder(backbone):
    """The backbone's VAE as a latent autoencoder (`SD3Autoencoder`)."""
    return SD3Autoencoder(backbone.vae, backbone.image_shape, backbone.latent_channels)


def generate_defaults():
    """`generate`'s defaults of an SD3 model, keras-hub's: `{"sampler": an
    EulerSampler of 28 steps, "guidance_scale": 7.0}`."""
    return {
        "sampler": EulerSampler(num_steps=DEFAULT_STEPS),
        "guidance_scale": DEFAULT_GUIDANCE,
    }


def _lora(lora_rank, lora_alpha, lora_mlp):
    if lora_rank is None:
        return None
    layers = LORA_ATTENTION + (LORA_MLP if lora_mlp else ())
    rank = check_int("lora_rank", lora_rank, 1)
    alpha = rank if lora_alpha is None else lora_alpha
    alpha = check_float("lora_alpha", alpha, greater_than=0.0)
    return {"rank": rank, "alpha": alpha, "layers": list(layers)}


def _remat_mmdit(mmdit):
    """`mmdit`, its joint blocks now recomputing their activations in the
    backward pass (`keras.remat` over each block's call; in place, so no
    copy of the weights is made, and the same outputs)."""
    for block in mmdit.joint_blocks:
        if not getattr(block, "rematerialized", False):
            block.call = _rematerialized(block.call)
            block.rematerialized = True
    return mmdit


def _rematerialized(call):
    # TensorFlow's recompute_grad takes tensors by position only in graph
    # mode (a `keras.RematScope` hands it Keras' `training` keyword and
    # fails there): `training` is bound outside it.
    def remat_call(inputs, context, timestep_embedding, training=None):
        def forward(x, c, t):
            return call(x, c, t, training=training)

        return keras.remat(forward)(inputs, context, timestep_embedding)

    return remat_call


def from_keras_hub(
    source,
    preprocessor=None,
    image_shape=None,
    lora_rank=None,
    lora_alpha=None,
    lora_mlp=False,
    remat=False,
    caption_dropout=0.0,
    **kwargs,
):
    """A `DiffusionModel` of keras-hub's Stable Diffusion 3, to train with
    `fit` (needs the `keras-hub` extra).

    - The denoiser is the backbone's MMDiT (`SD3Denoiser`), on latents.
    - The process is flow matching, `FlowMatchSchedule` with the backbone's
      `num_train_timesteps` and `shift` (3.0 for SD3) and SD3's logit-normal
      training density (mean 0, std 1); `generate` defaults to keras-hub's
      sampler, Euler over 28 steps (`EulerSampler` on a flow process is
      diffusers' and keras-hub's `FlowMatchEulerDiscreteScheduler`).
    - The latents are the backbone's VAE's, with its scale and shift
      (`SD3Autoencoder`): `fit` takes latents or the moments
      `keras_diffusion.latent.encode_dataset(model.autoencoder, images)`
      caches, as every latent model; `generate` decodes.
    - The text goes through the backbone's CLIP-L, CLIP-G (and T5 when
      present) encoders, frozen (saved with the model, never trained);
      each distinct caption is encoded once (a `FrozenTextConditioning` of
      `SD3TextEncoder`). `fit` takes `(latents, captions)`, `generate`
      `prompts=`.
    - `model.save` writes all of it to one `.keras` file, which
      `keras.saving.load_model` reads in safe mode.

    Args:
        source: a keras-hub `StableDiffusion3Backbone`, a
            `StableDiffusion3TextToImage`, or a preset name
            (`"stable_diffusion_3_medium"`; keras-hub downloads it).
        preprocessor: the `StableDiffusion3TextToImagePreprocessor` of a
            backbone (a task or preset brings its own). Defaults to `None`.
        image_shape: optional `(height, width, 3)` of a preset (keras-hub's
            default is 1024x1024). Defaults to `None`.
        lora_rank: optional int, train low-rank adapters of the MMDiT's
            attention projections (`attention_qkv`, `attention_proj`) of this
            rank and nothing else (`keras_diffusion.adapters.lora`).
            Defaults to `None`: the whole MMDiT trains.
        lora_alpha: optional float, the adapters' scale `alpha / rank`.
            Defaults to the rank.
        lora_mlp: bool, adapt the blocks' MLPs too. Defaults to `False`.
        remat: bool, each MMDiT block recomputes its activations in the
            backward pass (less memory, more compute); set on the backbone's
            MMDiT itself, whose outputs stay the same. Defaults to `False`.
        caption_dropout: float in [0, 1), the share of training captions
            replaced by the empty prompt (for guidance). Defaults to `0.0`.
        **kwargs: other `DiffusionModel` arguments (`ema_decay`, `seed`,
            `sampler`, `guidance_scale`, `posthoc_ema`, ...); a `schedule`
            given replaces SD3's (another shift or training density).

    Returns:
        A `DiffusionModel`; compile it and `fit`.
    """
    check_bool("lora_mlp", lora_mlp)
    check_bool("remat", remat)
    lora = _lora(lora_rank, lora_alpha, lora_mlp)
    backbone, preprocessor = _resolve(source, preprocessor, image_shape)
    conditioning = sd3_conditioning(backbone, preprocessor, caption_dropout)
    mmdit = _remat_mmdit(backbone.diffuser) if remat else backbone.diffuser
    denoiser = SD3Denoiser(mmdit, conditioning.encoder.pooled_width, name="sd3")
    autoencoder = sd3_autoencoder(backbone)
    schedule = kwargs.pop("schedule", None) or sd3_schedule(backbone)
    for name, value in generate_defaults().items():
        kwargs.setdefault(name, value)
    return DiffusionModel(
        denoiser,
        schedule=schedule,
        image_shape=autoencoder.latent_shape,
        autoencoder=autoencoder,
        conditioning=conditioning,
        lora=lora,
        **kwargs,
    )
