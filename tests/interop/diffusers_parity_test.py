"""Live parity with diffusers (needs the `peer` extra: torch and diffusers).

Random `UNet2DModel`s of several configs are loaded with `from_diffusers`
and compared with diffusers' forward pass; exported folders are loaded by
diffusers; and `DDIMPipeline` on an exported model, from the same x_T, gives
`DDIMSampler`'s images. Skipped when torch or diffusers is missing.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

import keras_diffusion  # noqa: E402

CONFIGS = {
    "unet_layout_classes": {
        "flip_sin_to_cos": False,
        "freq_shift": 0,
        "downsample_padding": 0,
        "attention_head_dim": None,
        "block_out_channels": (8, 16),
        "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
        "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
        "num_class_embeds": 5,
    },
    "diffusers_defaults_heads": {
        "block_out_channels": (8, 16, 16),
        "attention_head_dim": 4,
        "norm_eps": 1e-6,
        "freq_shift": 1,
        "down_block_types": ("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
        "up_block_types": ("AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    },
    "scale_shift_no_mid_norm": {
        "block_out_channels": (8, 16),
        "layers_per_block": 2,
        "resnet_time_scale_shift": "scale_shift",
        "attention_head_dim": 8,
        "down_block_types": ("AttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "UpBlock2D"),
    },
    "scale_shift_attn_groups_no_mid_attention": {
        "block_out_channels": (8, 8),
        "resnet_time_scale_shift": "scale_shift",
        "attn_norm_num_groups": 2,
        "add_attention": False,
        "time_embedding_dim": 24,
        "dropout": 0.2,
        "down_block_types": ("AttnDownBlock2D", "AttnDownBlock2D"),
        "up_block_types": ("AttnUpBlock2D", "AttnUpBlock2D"),
    },
}
SCHEDULER = {"num_train_timesteps": 100, "clip_sample": True}


def _random_pipeline(name, folder):
    options = {
        "sample_size": 16,
        "in_channels": 3,
        "out_channels": 3,
        "layers_per_block": 1,
        "norm_num_groups": 4,
        **CONFIGS[name],
    }
    torch.manual_seed(sorted(CONFIGS).index(name))
    unet = diffusers.UNet2DModel(**options).eval()
    with torch.no_grad():
        for parameter in unet.parameters():
            parameter.normal_(0.0, 0.3)
    scheduler = diffusers.DDPMScheduler(**SCHEDULER)
    diffusers.DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder)
    return unet


def _inputs(unet, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 16, 16, 3)).astype(np.float32)
    t = np.array([0.0, 41.5, 99.0], np.float32)
    classes = unet.config.num_class_embeds
    labels = None if classes is None else np.array([0, 2, classes - 1], np.int32)
    return x, t, labels


def _torch_output(unet, x, t, labels):
    with torch.no_grad():
        out = unet(
            torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
            torch.from_numpy(t),
            None if labels is None else torch.from_numpy(labels.astype(np.int64)),
        ).sample
    return out.numpy().transpose(0, 2, 3, 1)


def _keras_inputs(x, t, labels):
    return [x, t] + ([] if labels is None else [labels])


def _relative_error(out, ref):
    return float(np.max(np.abs(np.asarray(out) - ref)) / np.max(np.abs(ref)))


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    folder = str(tmp_path_factory.mktemp(request.param))
    unet = _random_pipeline(request.param, folder)
    return request.param, unet, keras_diffusion.from_diffusers(folder)


def test_live_and_ema_outputs_equal_diffusers(pair):
    name, unet, model = pair
    assert model.denoiser.count_params() == sum(p.numel() for p in unet.parameters())
    x, t, labels = _inputs(unet)
    ref = _torch_output(unet, x, t, labels)
    inputs = _keras_inputs(x, t, labels)
    live = model.denoiser(inputs, training=False)
    ema, _ = model.denoiser.stateless_call(
        model.ema.values(),
        [v.value for v in model.denoiser.non_trainable_variables],
        inputs,
        training=False,
    )
    errors = (_relative_error(live, ref), _relative_error(ema, ref))
    print(f"\n{name}: max relative error live {errors[0]:.2e}, ema {errors[1]:.2e}")
    assert max(errors) < 1e-4


def test_exported_folder_loads_in_diffusers_with_equal_outputs(pair, tmp_path):
    name, unet, model = pair
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    pipeline = diffusers.DDPMPipeline.from_pretrained(folder)
    exported = pipeline.unet.eval()
    x, t, labels = _inputs(unet, seed=1)
    ours = model.denoiser(_keras_inputs(x, t, labels), training=False)
    error = _relative_error(_torch_output(exported, x, t, labels), np.asarray(ours))
    print(f"\n{name}: exported max relative error {error:.2e}")
    assert error < 1e-4
    config = pipeline.scheduler.config
    assert config.num_train_timesteps == SCHEDULER["num_train_timesteps"]
    assert config.clip_sample is True and config.prediction_type == "epsilon"
    np.testing.assert_allclose(
        pipeline.scheduler.alphas_cumprod.numpy(),
        model.schedule.alphas_cumprod,
        rtol=1e-6,
    )


# DDIMPipeline samples unconditional U-Nets only. One architecture for each
# `clip_sample`: the sampling does not depend on it, and every architecture's
# export is diffusers' network (test_exported_folder_loads_in_diffusers_...).
@pytest.mark.parametrize(
    "pair, clip_sample",
    [
        ("diffusers_defaults_heads", True),
        ("scale_shift_attn_groups_no_mid_attention", False),
    ],
    indirect=["pair"],
)
def test_ddim_pipeline_on_an_export_matches_ddim_sampler(pair, tmp_path, clip_sample):
    name, unet, model = pair
    assert unet.config.num_class_embeds is None, name
    folder = keras_diffusion.to_diffusers(
        model, str(tmp_path / "export"), clip_sample=clip_sample
    )
    exported = diffusers.UNet2DModel.from_pretrained(folder, subfolder="unet")
    scheduler = diffusers.DDIMScheduler.from_pretrained(folder, subfolder="scheduler")
    pipeline = diffusers.DDIMPipeline(unet=exported, scheduler=scheduler)
    steps = 10
    x_T = torch.randn((2, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    theirs = pipeline(
        batch_size=2,
        generator=torch.Generator().manual_seed(0),
        num_inference_steps=steps,
        eta=0.0,
        output_type="np",
    ).images
    sampler = keras_diffusion.DDIMSampler(num_steps=steps, clip_sample=clip_sample)
    x0 = sampler.sample(
        lambda x, t: model.denoiser([x, t], training=False),
        x_T.numpy().transpose(0, 2, 3, 1),
        model.schedule,
        model.prediction_type,
    )
    ours = np.clip(np.asarray(x0) / 2 + 0.5, 0.0, 1.0)
    error = float(np.max(np.abs(ours - theirs)))
    print(f"\n{name}: DDIM clip_sample={clip_sample} max abs difference {error:.2e}")
    assert error < 1e-3


def test_a_unet_built_here_exports_to_the_same_network(tmp_path):
    # keras_diffusion.UNet's defaults are UNet2DModel with flip_sin_to_cos=False,
    # freq_shift=0, downsample_padding=0, one head, num_classes + 1 embeddings.
    unet = keras_diffusion.UNet(
        (16, 16, 3),
        widths=(8, 16),
        num_res_blocks=2,
        attention_levels=(False, True),
        num_classes=3,
        groups=4,
    )
    rng = np.random.default_rng(0)
    for variable in unet.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    model = keras_diffusion.DiffusionModel(unet, keras_diffusion.NoiseSchedule(100))
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    exported = diffusers.UNet2DModel.from_pretrained(folder, subfolder="unet").eval()
    assert exported.config.flip_sin_to_cos is False
    assert exported.config.num_class_embeds == 4
    x, t, _ = _inputs(exported)
    labels = np.array([0, 2, 3], np.int32)
    ours = unet(_keras_inputs(x, t, labels), training=False)
    error = _relative_error(_torch_output(exported, x, t, labels), np.asarray(ours))
    print(f"\nUNet built here: exported max relative error {error:.2e}")
    assert error < 1e-4


# A UNet2DConditionModel that keras_diffusion.UNet(cross_attention_dim=6)
# expresses: cross-attention at the second level and in the middle, two heads
# (diffusers' `attention_head_dim` is the number of heads), the mean-pooled
# context projected into the time embedding.
CONDITION = {
    "sample_size": 8,
    "in_channels": 3,
    "out_channels": 3,
    "block_out_channels": (8, 16),
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "UpBlock2D"),
    "cross_attention_dim": 6,
    "attention_head_dim": 2,
    "class_embed_type": "projection",
    "projection_class_embeddings_input_dim": 6,
}


def _context_inputs(seed=0, tokens=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(3, 8, 8, 3)).astype(np.float32)
    t = np.array([0.0, 41.5, 999.0], np.float32)
    context = rng.normal(size=(3, tokens, 6)).astype(np.float32)
    return x, t, context


def _torch_condition_output(unet, x, t, context):
    context_t = torch.from_numpy(context)
    with torch.no_grad():
        out = unet(
            torch.from_numpy(x.transpose(0, 3, 1, 2).copy()),
            torch.from_numpy(t),
            encoder_hidden_states=context_t,
            class_labels=context_t.mean(1),
        ).sample
    return out.numpy().transpose(0, 2, 3, 1)


def test_a_unet2dconditionmodel_loads_with_equal_outputs(tmp_path):
    from keras_diffusion.interop.diffusers import load_checkpoint, load_unet

    torch.manual_seed(0)
    theirs = diffusers.UNet2DConditionModel(**CONDITION).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)
    theirs.save_pretrained(str(tmp_path))
    ours = load_unet(load_checkpoint(str(tmp_path)))
    assert ours.cross_attention_dim == 6 and ours.num_heads == 2
    assert ours.count_params() == sum(p.numel() for p in theirs.parameters())
    for tokens in (1, 5):
        x, t, context = _context_inputs(tokens=tokens)
        ref = _torch_condition_output(theirs, x, t, context)
        error = _relative_error(ours([x, t, context], training=False), ref)
        print(
            f"\nUNet2DConditionModel, {tokens} tokens: max relative error {error:.2e}"
        )
        assert error < 1e-4


def test_a_cross_attention_unet_exports_to_the_same_network(tmp_path):
    from keras_diffusion.interop.diffusers import load_checkpoint, load_unet
    from keras_diffusion.interop.diffusers_export import write_unet

    unet = keras_diffusion.UNet(
        (8, 8, 3),
        widths=(8, 16),
        num_res_blocks=1,
        attention_levels=(False, True),
        up_attention_levels=(True, False),
        groups=4,
        num_heads=2,
        cross_attention_dim=6,
        downsample_padding=1,
    )
    rng = np.random.default_rng(0)
    for variable in unet.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    assert write_unet(unet, str(tmp_path)) == "UNet2DConditionModel"
    exported = diffusers.UNet2DConditionModel.from_pretrained(
        str(tmp_path), subfolder="unet"
    ).eval()
    assert exported.config.class_embed_type == "projection"
    assert list(exported.config.up_block_types) == ["UpBlock2D", "CrossAttnUpBlock2D"]
    x, t, context = _context_inputs(seed=1)
    ours = np.asarray(unet([x, t, context], training=False))
    error = _relative_error(_torch_condition_output(exported, x, t, context), ours)
    print(f"\ncross-attention UNet exported: max relative error {error:.2e}")
    assert error < 1e-4
    # And back: the same arguments and outputs.
    back = load_unet(load_checkpoint(str(tmp_path)))
    assert back.get_config() == {**unet.get_config(), "name": back.name}
    np.testing.assert_allclose(back([x, t, context]), ours, rtol=1e-6, atol=1e-6)
