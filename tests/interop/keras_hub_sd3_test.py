"""keras-hub's Stable Diffusion 3 through `from_keras_hub`, on a tiny random
backbone built as keras-hub's own tests build one (no download): the model
trains with `fit` (the loss falls, each caption encoded once), `generate`
samples from prompts, and LoRA trains its factors alone."""

import keras
import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")

import keras_diffusion  # noqa: E402
from keras_diffusion.adapters import lora as lora_layers  # noqa: E402
from keras_diffusion.interop import keras_hub_sd3  # noqa: E402
from keras_diffusion.interop.sd3_parts import SD3Autoencoder  # noqa: E402
from keras_diffusion.interop.sd3_text import sd3_conditioning  # noqa: E402
from keras_diffusion.latent import encode_dataset  # noqa: E402
from keras_diffusion.samplers import EulerSampler  # noqa: E402

IMAGE = 32
TOKENS = 8
CAPTIONS = ["airplane", "airport", "airplane", "airport"]


def _tiny_task():
    """keras-hub's test backbone (stable_diffusion_3_text_to_image_test.py),
    at 32x32 with 8-token prompts and a small position table."""
    from keras_hub.src.models.vae.vae_backbone import VAEBackbone

    models = keras_hub.models
    merges = ["a i", "p l", "n e</w>", "p o", "r t</w>", "ai r", "pl a"]
    merges += ["po rt</w>", "pla ne</w>"]
    # Every token of the merges (keras-hub 0.32 checks), 20 in all.
    vocab = ["air", "plane</w>", "port</w>", "<|endoftext|>", "<|startoftext|>"]
    vocab += ["a", "i", "p", "l", "n", "e</w>", "o", "r", "t</w>"]
    vocab += ["ai", "pl", "po", "rt</w>", "pla", "ne</w>"]
    vocab = {token: i for i, token in enumerate(vocab)}

    def preprocessor(**kwargs):
        tokenizer = models.CLIPTokenizer(vocab, merges, **kwargs)
        return models.CLIPPreprocessor(tokenizer, sequence_length=TOKENS)

    def clip(width, activation, name):
        return models.CLIPTextEncoder(
            20, width, width, 2, 2, 2 * width, activation, -2, TOKENS, name=name
        )

    backbone = models.StableDiffusion3Backbone(
        mmdit_patch_size=2,
        mmdit_hidden_dim=32,
        mmdit_num_layers=2,
        mmdit_num_heads=2,
        mmdit_position_size=4,
        mmdit_qk_norm=None,
        mmdit_dual_attention_indices=None,
        vae=VAEBackbone(
            [32, 32, 32, 32], [1, 1, 1, 1], [32, 32, 32, 32], [1, 1, 1, 1], name="vae"
        ),
        clip_l=clip(16, "quick_gelu", "clip_l"),
        clip_g=clip(32, "gelu", "clip_g"),
        image_shape=(IMAGE, IMAGE, 3),
    )
    text = models.StableDiffusion3TextToImagePreprocessor(
        preprocessor(pad_with_end_token=True), preprocessor()
    )
    return models.StableDiffusion3TextToImage(backbone, text)


@pytest.fixture(scope="module")
def task():
    keras.utils.set_random_seed(0)
    return _tiny_task()


@pytest.fixture(scope="module")
def moments(task):
    images = np.random.default_rng(0).uniform(-1, 1, (4, IMAGE, IMAGE, 3))
    autoencoder = SD3Autoencoder(task.backbone.vae, (IMAGE, IMAGE, 3), 16)
    return encode_dataset(autoencoder, images.astype("float32"))[0]


def _fixed_loss(model, moments, embeddings):
    """The mean loss of a few fixed draws (noise levels, noise, posterior
    samples)."""
    seeds = [tf.constant([3, i], "int32") for i in range(4)]
    return np.mean(
        [float(model.diffusion_loss(moments, embeddings, seed=s)) for s in seeds]
    )


def test_from_keras_hub_takes_the_backbones_parts(task, tmp_path):
    backbone = task.backbone
    model = keras_diffusion.from_keras_hub(backbone, preprocessor=task.preprocessor)
    schedule = model.schedule.get_config()
    assert schedule["shift"] == backbone.shift == 3.0
    assert schedule["timestep_sampling"] == "logit_normal"
    assert model.denoiser.mmdit is backbone.diffuser
    assert model.autoencoder.vae is backbone.vae
    assert model.image_shape == (IMAGE // 8, IMAGE // 8, 16)
    # Frozen text encoders are no weights of the model.
    assert not {id(v) for v in backbone.clip_l.weights} & {id(v) for v in model.weights}
    # No .keras file nor rebuild yet: one clear refusal.
    path = tmp_path / "model.keras"
    with pytest.raises(NotImplementedError, match="to_keras_hub"):
        model.save(path)
    assert not path.exists()
    with pytest.raises(NotImplementedError, match="lora_rank"):
        keras_diffusion.enable_lora(model, 2, layers=["*attention_qkv"])
    with pytest.raises(ValueError, match="preprocessor"):
        keras_diffusion.from_keras_hub(backbone)
    with pytest.raises(TypeError, match="source"):
        keras_diffusion.from_keras_hub(object())


@pytest.mark.heavy
def test_fit_lowers_the_loss_and_encodes_each_caption_once(task, moments):
    model = keras_diffusion.from_keras_hub(task, seed=0, ema_decay=None)
    # The captions' embeddings by a conditioning of their own: the model's
    # sees them first in its fit.
    embeddings = sd3_conditioning(task.backbone, task.preprocessor)
    embeddings = tf.constant(embeddings.embeddings(CAPTIONS))
    before = _fixed_loss(model, moments, embeddings)
    encoder = model.conditioning.encoder
    calls = encoder.calls
    model.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    history = model.fit(moments, CAPTIONS, batch_size=2, epochs=3, verbose=0)
    assert len(history.history["loss"]) == 3
    # Two captions, six steps: at most one encoder call a caption, and
    # both cached.
    assert 1 <= encoder.calls - calls <= 2
    calls = encoder.calls
    model.conditioning.embeddings(["airplane", "airport"])
    assert encoder.calls == calls
    assert _fixed_loss(model, moments, embeddings) < before


def test_generate_from_prompts(task):
    model = keras_diffusion.from_keras_hub(task, seed=0)
    model.compile(jit_compile=False)  # graph mode: no XLA compile in the test
    sampler = EulerSampler(num_steps=2)
    prompts = ["airplane", "airport"]
    images = model.generate(
        2, prompts=prompts, sampler=sampler, guidance_scale=3.0, seed=1
    )
    assert images.shape == (2, IMAGE, IMAGE, 3)
    assert np.isfinite(images).all() and np.abs(images).max() <= 1.0
    again = model.generate(
        2, prompts=prompts, sampler=sampler, guidance_scale=3.0, seed=1
    )
    np.testing.assert_array_equal(images, again)
    swapped = model.generate(
        2, prompts=prompts[::-1], sampler=sampler, guidance_scale=3.0, seed=1
    )
    assert not np.array_equal(images, swapped)


def _adapted(model):
    layers = lora_layers.adaptable_layers(model.denoiser)
    return [p for p, layer in layers.items() if getattr(layer, "lora_enabled", False)]


@pytest.fixture(scope="module")
def lora_fit(moments):
    """A LoRA model (attention and MLPs) with remat, on a backbone of its
    own, fit over 4 batches with gradient accumulation (2 updates); its
    weights before the fit."""
    model = keras_diffusion.from_keras_hub(
        _tiny_task(), lora_rank=2, lora_mlp=True, remat=True, seed=0
    )
    before = [np.array(v) for v in model.denoiser.weights]
    optimizer = keras.optimizers.Adam(1e-2, gradient_accumulation_steps=2)
    model.compile(optimizer=optimizer, jit_compile=False)
    model.fit(moments, CAPTIONS, batch_size=2, epochs=2, verbose=0)
    return model, before


def test_lora_trains_the_factors_alone(lora_fit):
    model, before = lora_fit
    assert model.trainable_variables and all(
        v.name in lora_layers.FACTORS for v in model.trainable_variables
    )
    adapted = _adapted(model)
    names = ("attention_qkv", "attention_proj", "mlp/dense1", "mlp/dense2")
    assert all(any(p.endswith(n) for p in adapted) for n in names)
    assert all(p.endswith(names) and "_block/" in p for p in adapted)
    # Without `lora_mlp`, the attention projections alone.
    attention = lora_layers.select(model.denoiser, keras_hub_sd3.LORA_ATTENTION)
    assert all(p.endswith(names[:2]) for p in attention)
    assert int(model.optimizer.iterations) == 2  # 4 batches, 2 updates
    assert all(block.rematerialized for block in model.denoiser.mmdit.joint_blocks)
    changed = {
        v.name
        for v, value in zip(model.denoiser.weights, before, strict=True)
        if not np.array_equal(np.array(v), value)
    }
    # The base bit for bit; the factors moved.
    assert changed == {"lora_kernel_a", "lora_kernel_b"}


def test_to_keras_hub_generates_our_images(lora_fit):
    model, _ = lora_fit
    hub = keras_diffusion.to_keras_hub(model)
    assert isinstance(hub, keras_hub.models.StableDiffusion3TextToImage)
    assert not any("lora" in v.name for v in hub.backbone.diffuser.weights)
    prompts, steps, guidance, seed = ["airplane", "airport"], 3, 4.0, 5
    ours = model.generate(
        2,
        prompts=prompts,
        sampler=EulerSampler(steps),
        guidance_scale=guidance,
        seed=seed,
    )
    # keras-hub's own loop from our starting latents (`generate`'s draw for
    # the first batch of `seed`).
    latents = tf.random.stateless_normal(
        (2,) + model.image_shape,
        seed=tf.random.experimental.stateless_fold_in(tf.constant([seed, 0]), 7),
    )
    text = hub.preprocessor
    token_ids = text.generate_preprocess(tf.constant(prompts))
    negative = text.generate_preprocess(tf.constant(["", ""]))
    hub.backbone.configure_scheduler(steps)
    theirs = hub.generate_step(
        latents, (token_ids, negative), steps, tf.constant(guidance)
    )
    np.testing.assert_allclose(ours, np.clip(theirs, -1.0, 1.0), atol=1e-4)
