"""keras-hub's Stable Diffusion 3 through `from_keras_hub`, on a tiny random
backbone built as keras-hub's own tests build one (no download): the model
trains with `fit` (the loss falls, each caption encoded once), `generate`
samples from prompts, and LoRA trains its factors alone."""

import logging
import pathlib
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")

import keras_diffusion  # noqa: E402
from keras_diffusion.adapters import lora as lora_layers  # noqa: E402
from keras_diffusion.conditioning import pack_pooled  # noqa: E402
from keras_diffusion.interop import keras_hub_sd3  # noqa: E402
from keras_diffusion.interop.sd3_parts import SD3Autoencoder  # noqa: E402
from keras_diffusion.interop.sd3_text import sd3_conditioning  # noqa: E402
from keras_diffusion.latent import encode_dataset  # noqa: E402
from keras_diffusion.samplers import EulerSampler  # noqa: E402
from keras_diffusion.utils import keras_internals  # noqa: E402

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
    # keras-hub builds the pooled projections as identities; a preset's are
    # trained: random ones here, so that a lost projection shows.
    rng = np.random.default_rng(1)
    for projection in (backbone.clip_l_projection, backbone.clip_g_projection):
        kernel = projection.dense.kernel
        kernel.assign(rng.normal(0.0, 0.5, kernel.shape).astype("float32"))
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
    # A schedule given replaces SD3's (a run's --shift).
    shifted = keras_diffusion.FlowMatchSchedule(shift=1.0)
    other = keras_diffusion.from_keras_hub(
        backbone, preprocessor=task.preprocessor, schedule=shifted
    )
    assert other.schedule.get_config()["shift"] == 1.0
    assert model.denoiser.mmdit is backbone.diffuser
    assert model.autoencoder.vae is backbone.vae
    assert model.image_shape == (IMAGE // 8, IMAGE // 8, 16)
    # The text encoders are frozen: none of their weights trains.
    encoder = model.conditioning.encoder
    assert encoder.clip_l is backbone.clip_l and not encoder.trainable_variables
    trainable = {id(v) for v in model.trainable_variables}
    assert not {id(v) for v in encoder.weights} & trainable
    # Their embeddings are keras-hub's own (its pooled projections included).
    texts = ["airplane", "airport"]
    ids = task.preprocessor.generate_preprocess(tf.constant(texts))
    context, _, pooled, _ = backbone.encode_text_step(ids, ids)
    np.testing.assert_allclose(
        model.conditioning.embeddings(texts),
        pack_pooled(np.array(context), np.array(pooled)),
        atol=1e-5,
    )
    # to_diffusers writes an SD3 model's LoRA alone: none here, nothing written.
    with pytest.raises(ValueError, match="lora_rank"):
        keras_diffusion.to_diffusers(model, tmp_path / "lora")
    with pytest.raises(ValueError, match="`sampler` do not apply.*sampler=.euler."):
        keras_diffusion.to_diffusers(model, tmp_path / "lora", sampler="euler")
    assert not (tmp_path / "lora").exists()
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
    # `evaluate` takes the captions `fit` takes, embedded in the pipeline.
    for captions in (CAPTIONS, np.array(CAPTIONS)):
        loss = model.evaluate(moments, captions, batch_size=2, verbose=0)
        assert np.isfinite(loss)


def test_enable_lora_adapts_what_from_keras_hub_adapts(task):
    model = keras_diffusion.from_keras_hub(task, seed=0)
    adapted = keras_diffusion.enable_lora(model, rank=2)
    attention = lora_layers.select(model.denoiser, keras_hub_sd3.LORA_ATTENTION)
    assert _adapted(adapted) == list(attention)
    assert adapted.lora["layers"] == list(keras_hub_sd3.LORA_ATTENTION)
    # A copy: the backbone's MMDiT is not adapted.
    assert not _adapted(model)


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


def test_save_and_load_generate_the_same_images(lora_fit, tmp_path):
    """A `.keras` file holds the whole SD3 model (MMDiT, LoRA, VAE, text
    encoders, tokenizers): loaded in safe mode, it generates the same images
    and trains the same factors."""
    model, _ = lora_fit
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    kwargs = {"prompts": ["airplane", "airport"], "guidance_scale": 3.0, "seed": 1}
    kwargs["sampler"] = EulerSampler(num_steps=2)
    np.testing.assert_array_equal(
        loaded.generate(2, **kwargs), model.generate(2, **kwargs)
    )
    names = [v.path for v in model.trainable_variables]
    assert [v.path for v in loaded.trainable_variables] == names


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


def _dense(layer):
    """A keras Dense's base `(weight, bias)` as torch's Linear holds them."""
    kernel = layer.kernel
    if getattr(layer, "lora_enabled", False):
        kernel = keras_internals.lora_base_kernel(layer)
    return np.array(kernel).T, np.array(layer.bias)


def _sd3_checkpoint(mmdit):
    """The MMDiT's base weights under SD3's own checkpoint keys, as keras-hub's
    conversion (tools/checkpoint_conversion/convert_stable_diffusion_3_
    checkpoints.py) maps them, for diffusers' own converter."""
    layers = {
        "context_embedder": mmdit.context_embedding,
        "y_embedder.mlp.0": mmdit.vector_embedding.dense1,
        "y_embedder.mlp.2": mmdit.vector_embedding.dense2,
        "t_embedder.mlp.0": mmdit.timestep_embedding.mlp.dense1,
        "t_embedder.mlp.2": mmdit.timestep_embedding.mlp.dense2,
        "final_layer.adaLN_modulation.1": mmdit.output_ada_layer_norm.dense,
        "final_layer.linear": mmdit.output_dense,
    }
    for i, block in enumerate(mmdit.joint_blocks):
        for stream in ("x_block", "context_block"):
            part, key = getattr(block, stream), f"joint_blocks.{i}.{stream}"
            layers[f"{key}.adaLN_modulation.1"] = part.ada_layer_norm.dense
            layers[f"{key}.attn.qkv"] = part.attention_qkv
            if hasattr(part, "attention_proj"):
                layers[f"{key}.attn.proj"] = part.attention_proj
                layers[f"{key}.mlp.fc1"] = part.mlp.dense1
                layers[f"{key}.mlp.fc2"] = part.mlp.dense2
    checkpoint = {}
    for key, layer in layers.items():
        checkpoint[f"{key}.weight"], checkpoint[f"{key}.bias"] = _dense(layer)
    patch = mmdit.patch_embedding.patch_embedding
    checkpoint["x_embedder.proj.weight"] = np.array(patch.kernel).transpose(3, 2, 0, 1)
    checkpoint["x_embedder.proj.bias"] = np.array(patch.bias)
    checkpoint["pos_embed"] = np.array(mmdit.position_embedding.position_embeddings)[
        None
    ]
    return checkpoint


def test_sd3_lora_loads_into_diffusers_transformer(tmp_path):
    """The LoRA file of `to_diffusers`, read and loaded by diffusers' own
    `StableDiffusion3Pipeline` loader (peft) into an `SD3Transformer2DModel`
    holding the same base weights, gives our denoiser's output."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError as error:  # the peer extra has it; CI requires it
        pytest.fail(f"diffusers' LoRA loader needs peft (the peer extra): {error}")
    from diffusers.loaders.single_file_utils import (
        convert_sd3_transformer_checkpoint_to_diffusers,
    )

    model = keras_diffusion.from_keras_hub(
        _tiny_task(), lora_rank=2, lora_alpha=3.0, lora_mlp=True, seed=0
    )
    rng = np.random.default_rng(0)
    for factor in model.denoiser.trainable_variables:
        factor.assign(rng.normal(0.0, 0.3, factor.shape).astype("float32"))
    keras_diffusion.to_diffusers(model, tmp_path, use_ema=False, verbose=0)

    mmdit = model.denoiser.mmdit
    hidden = mmdit.context_embedding.kernel.shape[1]
    transformer = diffusers.SD3Transformer2DModel(
        sample_size=IMAGE // 8,
        patch_size=2,
        in_channels=16,
        num_layers=2,
        attention_head_dim=hidden // 2,
        num_attention_heads=2,
        joint_attention_dim=mmdit.context_embedding.kernel.shape[0],
        caption_projection_dim=hidden,
        pooled_projection_dim=mmdit.vector_embedding.dense1.kernel.shape[0],
        out_channels=16,
        pos_embed_max_size=4,
    ).eval()
    checkpoint = {k: torch.from_numpy(v) for k, v in _sd3_checkpoint(mmdit).items()}
    state = convert_sd3_transformer_checkpoint_to_diffusers(checkpoint)
    transformer.load_state_dict(state, strict=True)

    x = rng.normal(size=(2, IMAGE // 8, IMAGE // 8, 16)).astype("float32")
    context = rng.normal(size=(2, 6, transformer.config.joint_attention_dim))
    pooled = rng.normal(size=(2, transformer.config.pooled_projection_dim))
    t = np.array([250.0, 700.0], "float32")

    def theirs():
        with torch.no_grad():
            out = transformer(
                hidden_states=torch.from_numpy(x).permute(0, 3, 1, 2),
                encoder_hidden_states=torch.from_numpy(context.astype("float32")),
                pooled_projections=torch.from_numpy(pooled.astype("float32")),
                timestep=torch.from_numpy(t),
            ).sample
        return out.permute(0, 2, 3, 1).numpy()

    base = theirs()
    # What `StableDiffusion3Pipeline.load_lora_weights(folder)` does for the
    # transformer; diffusers logs unexpected or missing LoRA keys as warnings
    # (its loggers do not propagate: a handler of their own).
    pipeline = diffusers.StableDiffusion3Pipeline
    warned = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = warned.append
    logging.getLogger("diffusers").addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lora, metadata = pipeline.lora_state_dict(
                str(tmp_path), return_lora_metadata=True
            )
            pipeline.load_lora_into_transformer(
                lora, transformer=transformer, metadata=metadata
            )
    finally:
        logging.getLogger("diffusers").removeHandler(handler)
    assert not [r.getMessage() for r in warned]
    loaders = {"peft", "diffusers"}  # their own warnings, deprecations apart
    assert not [
        str(w.message)
        for w in caught
        if loaders & set(pathlib.Path(w.filename).parts)
        and not issubclass(w.category, (DeprecationWarning, FutureWarning))
    ]
    # peft adapted exactly the file's modules (the scale in lora_B: 1 here).
    adapted = {
        name: module.scaling["default_0"]
        for name, module in transformer.named_modules()
        if isinstance(module, LoraLayer)
    }
    names = {k.removeprefix("transformer.").split(".lora_")[0] for k in lora}
    assert adapted == dict.fromkeys(names, 1.0)
    assert {f"transformer_blocks.0.attn.{m}" for m in ("to_q", "to_v")} < names
    assert "transformer_blocks.1.attn.to_add_out" not in names
    ours = model.denoiser([x, t, pack_pooled(context, pooled)])
    np.testing.assert_allclose(theirs(), np.array(ours), atol=1e-4)
    assert np.abs(base - np.array(ours)).max() > 1e-2  # the LoRA counts


def test_mixed_precision_lora_trains_and_generates():
    """`mixed_bfloat16` set before building, as a user would: the MMDiT and
    the VAE compute in bfloat16, the cached moments are float32, the LoRA
    factors (and their EMA) stay float32 variables that a short fit moves,
    the schedule's maths stays float32 and `generate` gives finite images."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = keras_diffusion.from_keras_hub(_tiny_task(), lora_rank=2, seed=0)
    assert model.denoiser.mmdit.compute_dtype == "bfloat16"
    assert model.autoencoder.vae.compute_dtype == "bfloat16"
    images = np.random.default_rng(0).uniform(-1, 1, (2, IMAGE, IMAGE, 3))
    moments = encode_dataset(model.autoencoder, images.astype("float32"))[0]
    assert moments.dtype == "float32" and np.isfinite(moments).all()
    factors = model.trainable_variables
    assert factors and all(v.dtype == "float32" for v in factors)
    assert all(v.dtype == "float32" for v in model.ema.shadows)
    assert model.schedule.draw_levels(2, tf.constant([0, 1])).dtype == "float32"
    before = [np.array(v) for v in factors]
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    history = model.fit(moments, CAPTIONS[:2], batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert all(
        not np.array_equal(np.array(v), b)
        for v, b in zip(factors, before, strict=True)
        if v.name == "lora_kernel_b"
    )
    images = model.generate(
        1, prompts="airplane", sampler=EulerSampler(2), guidance_scale=3.0, seed=1
    )
    assert images.shape == (1, IMAGE, IMAGE, 3) and np.isfinite(images).all()


def test_posthoc_ema_of_a_lora_fit(moments, tmp_path):
    """With LoRA, the post-hoc EMA profiles track the factors alone; a fit
    writes their snapshots, and the reconstruction (what
    `keras_diffusion.posthoc_ema` does with a run folder's) gives a model
    with the reconstructed factors, the rest of it (VAE and text encoders
    included) the trained model's, that generates."""
    from keras_diffusion.averages import posthoc

    model = keras_diffusion.from_keras_hub(
        _tiny_task(), lora_rank=2, seed=0, ema_decay=None, posthoc_ema=[0.05, 0.1]
    )
    factors = model.trainable_variables
    assert factors and all(v.name in lora_layers.FACTORS for v in factors)
    tracked = model.power_ema.values()
    assert len(tracked) == 2 and all(len(p) == len(factors) for p in tracked)
    callback = keras_diffusion.callbacks.PosthocSnapshots(str(tmp_path), every=1)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    fit = {"batch_size": 2, "epochs": 1, "verbose": 0, "callbacks": [callback]}
    model.fit(moments, CAPTIONS, **fit)
    assert posthoc.snapshot_steps(tmp_path) == [1, 2]
    values, _ = posthoc.reconstruct(tmp_path, sigma_rel=0.1)
    averaged = posthoc.without_profiles(model)
    posthoc.assign(averaged, values)
    profile = model.power_ema.values()[1]  # the tracked 0.1 profile itself
    for value, variable in zip(profile, averaged.trainable_variables, strict=True):
        np.testing.assert_allclose(np.array(variable), value, atol=1e-6)
    # Everything else is the trained model's, bit for bit.
    for part in ("denoiser", "autoencoder", "conditioning"):
        ours, theirs = getattr(model, part).weights, getattr(averaged, part).weights
        for a, b in zip(ours, theirs, strict=True):
            if a.name not in lora_layers.FACTORS:
                np.testing.assert_array_equal(np.array(a), np.array(b), a.path)
    kwargs = {"prompts": "airplane", "sampler": EulerSampler(2), "seed": 1}
    images = averaged.generate(1, guidance_scale=3.0, **kwargs)
    assert images.shape == (1, IMAGE, IMAGE, 3) and np.isfinite(images).all()
