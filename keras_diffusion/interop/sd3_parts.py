"""SD3's networks as this library's parts: its MMDiT as a denoiser, its VAE
as a latent autoencoder, each wrapping keras-hub's layers (not copying them).
"""

import keras
from keras import ops

from keras_diffusion.conditioning import split_pooled
from keras_diffusion.latent.stable_diffusion_autoencoder import posterior_draw
from keras_diffusion.utils.configurable import deserialized

# The MMDiT's layers LoRA adapts: each block's attention projections (the
# second set, `attention_qkv2`/`attention_proj2`, in SD3.5's dual-attention
# blocks), and with `lora_mlp` its blocks' MLPs (not the embeddings' MLPs).
LORA_ATTENTION = ("*attention_qkv*", "*attention_proj*")
LORA_MLP = ("*_block/mlp/dense*",)


@keras.saving.register_keras_serializable(package="keras_diffusion")
class SD3Denoiser(keras.Model):
    """keras-hub's MMDiT called as a `DiffusionModel` denoiser,
    `denoiser([x_t, t, condition])`.

    `x_t` are the latents `(batch, h, w, 16)`, `t` the flow-matching
    timestep `s * 1000` (what keras-hub's scheduler gives the MMDiT) and
    `condition` the text's context with the pooled vector as a last token
    (`keras_diffusion.conditioning.pack_pooled`); the output is the MMDiT's
    velocity.

    Args:
        mmdit: a keras-hub `MMDiT` (a `StableDiffusion3Backbone`'s
            `diffuser`).
        pooled_width: int, the pooled projection's width.
    """

    # What `keras_diffusion.enable_lora` adapts when given no `layers`: the
    # attention projections, as `from_keras_hub(lora_rank=...)`.
    lora_targets = LORA_ATTENTION

    def __init__(self, mmdit, pooled_width, **kwargs):
        super().__init__(**kwargs)
        self.mmdit = mmdit
        self.pooled_width = int(pooled_width)

    def call(self, inputs, training=False):
        x_t, t, condition = inputs
        context, pooled = split_pooled(condition, self.pooled_width)
        return self.mmdit(
            {
                "latent": x_t,
                "context": context,
                "pooled_projection": pooled,
                "timestep": ops.reshape(ops.cast(t, "float32"), (-1, 1)),
            },
            training=training,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "mmdit": keras.saving.serialize_keras_object(self.mmdit),
            "pooled_width": self.pooled_width,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**deserialized(config, "mmdit"))


@keras.saving.register_keras_serializable(package="keras_diffusion")
class SD3Autoencoder(keras.Model):
    """keras-hub's SD3 VAE (`VAEBackbone`), frozen, as a latent autoencoder
    of `DiffusionModel` (the interface of
    `keras_diffusion.latent.StableDiffusionAutoencoder`, so that
    `keras_diffusion.latent.encode_dataset` caches its moments).

    Latents are `(z - shift) * scale` for z drawn from the posterior (or its
    mean), keras-hub's `encode_image_step`; decoding is its `decode_step`,
    `vae.decode(latents / scale + shift)`, clipped to [-1, 1].

    Args:
        vae: a keras-hub `VAEBackbone` (a backbone's `vae`).
        image_shape: `(height, width, 3)`, multiples of 8.
        latent_channels: int, the latent's channels (SD3: 16).
        sample_posterior: bool, draw from the posterior rather than take its
            mean. Defaults to `True`.
    """

    def __init__(self, vae, image_shape, latent_channels, sample_posterior=True, **kw):
        super().__init__(**kw)
        self.vae = vae
        self.image_shape = tuple(int(d) for d in image_shape)
        self.latent_channels = int(latent_channels)
        self.sample_posterior = bool(sample_posterior)
        self.vae.trainable = False
        self.trainable = False

    @property
    def latent_shape(self):
        height, width, _ = self.image_shape
        return (height // 8, width // 8, self.latent_channels)

    def encode_moments(self, images):
        """The posterior's `(mean, logvar)`, unscaled."""
        moments = self.vae.encoder(ops.convert_to_tensor(images, "float32"))
        mean, logvar = ops.split(ops.cast(moments, "float32"), 2, axis=-1)
        return mean, ops.clip(logvar, -30.0, 20.0)

    def scaled(self, z):
        """Latents of unscaled posterior values `z`."""
        return (z - self.vae.shift) * self.vae.scale

    def sample_latents(self, moments, seed=None):
        """Scaled latents from moments `concatenate([mean, logvar], -1)`;
        `seed` as `StableDiffusionAutoencoder.sample_latents` takes it."""
        return self.scaled(posterior_draw(moments, self.sample_posterior, seed))

    def encode(self, images, seed=None):
        mean, logvar = self.encode_moments(images)
        return self.sample_latents(ops.concatenate([mean, logvar], axis=-1), seed)

    def encode_mean(self, images):
        return self.scaled(self.encode_moments(images)[0])

    def decode(self, latents):
        """Images in [-1, 1] of scaled latents."""
        z = ops.convert_to_tensor(latents, "float32") / self.vae.scale + self.vae.shift
        images = self.vae.decode(z, training=False)
        return ops.clip(ops.cast(images, "float32"), -1.0, 1.0)

    def call(self, images):
        return self.decode(self.encode(images))

    def get_config(self):
        return {
            **super().get_config(),
            "vae": keras.saving.serialize_keras_object(self.vae),
            "image_shape": list(self.image_shape),
            "latent_channels": self.latent_channels,
            "sample_posterior": self.sample_posterior,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**deserialized(config, "vae"))
