"""from_diffusers / to_diffusers refuse bad input in one line naming the thing."""

import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest

import keras_diffusion
from keras_diffusion.interop import diffusers_config

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
PIPELINE = os.path.join(FIXTURES, "pipeline_unet_layout")
WEIGHTS = "diffusion_pytorch_model.safetensors"


@pytest.fixture
def pipeline(tmp_path):
    folder = tmp_path / "pipeline"
    shutil.copytree(PIPELINE, folder)
    return folder


def _edit_config(folder, **changes):
    path = folder / "unet" / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _raises(match, source, **kwargs):
    with pytest.raises(ValueError, match=match) as info:
        keras_diffusion.from_diffusers(str(source), **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_missing_folder_is_named(tmp_path):
    missing = tmp_path / "no_such_folder"
    message = _raises("No such file or folder", missing)
    assert str(missing) in message


def test_folder_without_a_config(tmp_path):
    _raises("no model_index.json or config.json", tmp_path)


def test_source_of_the_wrong_type():
    with pytest.raises(TypeError, match="Argument `source`"):
        keras_diffusion.from_diffusers(3)


def test_unet2dconditionmodel_options_the_unet_lacks_are_listed(pipeline):
    # The UNet2DModel's block types, and what no cross-attention UNet holds.
    _edit_config(
        pipeline,
        _class_name="UNet2DConditionModel",
        use_linear_projection=True,
        transformer_layers_per_block=2,
        attention_head_dim=[1, 2],
    )
    message = _raises("options keras_diffusion.UNet does not support", pipeline)
    for listed in (
        "use_linear_projection=True",
        "transformer_layers_per_block=2",
        "class_embed_type=None",
        "down_block_types ['AttnDownBlock2D']",
        "mid_block_type='UNetMidBlock2D'",
    ):
        assert listed in message, message


def _cross_attention_unet(**overrides):
    from tests.denoisers import tiny_unet

    return tiny_unet(
        (8, 8, 3),
        widths=(4, 8),
        attention_levels=(False, True),
        cross_attention_dim=6,
        **overrides,
    )


def test_a_unet2dconditionmodel_needs_a_conditioning(tmp_path):
    from keras_diffusion.interop.diffusers_export import write_unet

    write_unet(_cross_attention_unet(), str(tmp_path))
    _raises("UNet2DConditionModel.*width 6.*pass `conditioning=`", tmp_path)


def test_export_refuses_a_middle_block_without_attention(tmp_path):
    from keras_diffusion.interop.diffusers_export import write_unet

    unet = _cross_attention_unet(mid_attention=False)
    with pytest.raises(ValueError, match="mid_attention=False") as info:
        write_unet(unet, str(tmp_path / "out"))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_pipeline_of_another_unet_class_is_refused(pipeline):
    index = json.loads((pipeline / "model_index.json").read_text())
    index["unet"] = ["diffusers", "UNet2DConditionModel"]
    (pipeline / "model_index.json").write_text(json.dumps(index))
    _raises("UNet2DConditionModel", pipeline)


@pytest.mark.parametrize(
    "changes, listed",
    [
        ({"time_embedding_type": "fourier"}, "time_embedding_type='fourier'"),
        ({"class_embed_type": "timestep"}, "class_embed_type='timestep'"),
        (
            {
                "downsample_type": "resnet",
                "down_block_types": ["AttnDownBlock2D", "DownBlock2D"],
            },
            "downsample_type='resnet'",
        ),
        (
            {
                "upsample_type": "resnet",
                "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
            },
            "upsample_type='resnet'",
        ),
        ({"mid_block_type": "UNetMidBlock2DCrossAttn"}, "UNetMidBlock2DCrossAttn"),
        ({"num_class_embeds": 0}, "num_class_embeds=0"),
        ({"mid_block_scale_factor": 1.5}, "mid_block_scale_factor=1.5"),
        (
            {"down_block_types": ["SkipDownBlock2D", "AttnSkipDownBlock2D"]},
            "SkipDownBlock2D",
        ),
        ({"up_block_types": ["AttnSkipUpBlock2D", "UpBlock2D"]}, "AttnSkipUpBlock2D"),
        ({"act_fn": "gelu"}, "act_fn='gelu'"),
        ({"out_channels": 2}, "out_channels=2"),
    ],
)
def test_unsupported_options_are_listed(pipeline, changes, listed):
    _edit_config(pipeline, **changes)
    message = _raises("options keras_diffusion.UNet does not support", pipeline)
    assert listed in message


def test_every_unsupported_option_is_listed_at_once():
    config = {
        "_class_name": "UNet2DModel",
        "sample_size": 8,
        "time_embedding_type": "fourier",
        "class_embed_type": "identity",
        "downsample_type": "resnet",
        "down_block_types": ["AttnDownBlock2D", "SkipDownBlock2D"],
        "up_block_types": ["SkipUpBlock2D", "UpBlock2D"],
        "block_out_channels": [4, 4],
    }
    with pytest.raises(ValueError) as info:
        diffusers_config.unet_kwargs(config, "'x'")
    for text in ("fourier", "identity", "resnet", "SkipDownBlock2D", "SkipUpBlock2D"):
        assert text in str(info.value)


def test_a_sampling_type_that_reaches_no_block_loads(pipeline):
    # Its AttnDownBlock2D is the last down block, which does not downsample:
    # diffusers ignores the option (its DownBlock2D takes none).
    _edit_config(pipeline, downsample_type="resnet")
    model = keras_diffusion.from_diffusers(str(pipeline))
    reference = keras_diffusion.from_diffusers(PIPELINE)
    assert model.denoiser.get_config() == reference.denoiser.get_config()


def test_heads_wider_than_an_attention_level_are_named(pipeline):
    # diffusers builds 4 // 8 = 0 heads there and fails in its forward pass.
    _edit_config(pipeline, attention_head_dim=8)
    _raises("attention_head_dim=8", pipeline)


def test_a_null_class_of_one_embedding_is_refused(pipeline):
    _edit_config(pipeline, num_class_embeds=1)
    _raises("num_class_embeds=1 with a null class", pipeline, null_class=True)


def test_truncated_safetensors_is_named(pipeline):
    path = pipeline / "unet" / WEIGHTS
    path.write_bytes(path.read_bytes()[:-100])
    message = _raises("Cannot read the safetensors file", pipeline)
    assert str(path) in message


def test_pickle_only_folder_is_refused_by_default(pipeline):
    unet = pipeline / "unet"
    (unet / WEIGHTS).unlink()
    (unet / "diffusion_pytorch_model.bin").write_bytes(b"not read")
    _raises(
        "only a pickled checkpoint .*convert it once to safetensors.*allow_pickle=True",
        pipeline,
    )


def test_pickle_without_torch_says_so(pipeline, monkeypatch):
    unet = pipeline / "unet"
    (unet / WEIGHTS).unlink()
    (unet / "diffusion_pytorch_model.bin").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)
    _raises("needs torch", pipeline, allow_pickle=True)


def test_hub_id_offline_fails_fast_naming_the_id(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    message = _raises(
        "Cannot fetch the Hub id 'google/ddpm-cifar10-32'", "google/ddpm-cifar10-32"
    )
    assert "local folder" in message


def test_hub_id_without_huggingface_hub_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    message = _raises("'someone/some-model'", "someone/some-model")
    assert "huggingface_hub is not installed" in message


def test_weights_of_another_shape_are_named(pipeline):
    # A config with wider levels than the weights were saved with.
    _edit_config(pipeline, block_out_channels=[4, 8])
    message = _raises("do not match its config|has shape", pipeline)
    assert "pipeline" in message


def test_weight_shape_mismatch_names_the_tensor(pipeline):
    _edit_config(pipeline, num_class_embeds=4)
    _raises(
        "'class_embedding.weight' .* has shape \\(3, 8\\); the config implies "
        "\\(4, 8\\)",
        pipeline,
    )


def test_missing_and_unused_tensors_are_listed(pipeline):
    _edit_config(pipeline, num_class_embeds=None)
    _raises("unused class_embedding.weight", pipeline)


def test_custom_denoiser_is_not_exported_and_nothing_is_written(tmp_path):
    x_in, t_in = keras.Input((8, 8, 1)), keras.Input(())
    out = keras.layers.Conv2D(1, 3, padding="same")(x_in)
    denoiser = keras.Model([x_in, t_in], out)
    model = keras_diffusion.DiffusionModel(denoiser)
    target = tmp_path / "export"
    with pytest.raises(ValueError, match="diffusers cannot express this denoiser"):
        keras_diffusion.to_diffusers(model, str(target))
    assert not target.exists()


def test_per_level_head_sizes_are_not_exported(tmp_path):
    unet = keras_diffusion.UNet(
        (8, 8, 1),
        widths=(4, 8),
        num_res_blocks=1,
        attention_levels=(True, True),
        num_heads=2,
        groups=2,
    )
    target = tmp_path / "export"
    with pytest.raises(ValueError, match="one attention head size"):
        keras_diffusion.to_diffusers(keras_diffusion.DiffusionModel(unet), str(target))
    assert not target.exists()


def test_export_of_something_else_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="Argument `model`"):
        keras_diffusion.to_diffusers(object(), str(tmp_path))


def test_a_text_model_exports_its_averaged_unet_and_reads_back(tmp_path):
    text = keras_diffusion.TextConditioning(sequence_length=4, width=6, heads=2)
    text.adapt(["red heart", "cat face"])
    model = keras_diffusion.DiffusionModel(_cross_attention_unet(), conditioning=text)
    # One step, run eagerly: it moves the averages off the weights as a
    # traced step would, without half a minute of tracing the text model.
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    images = np.zeros((4, 8, 8, 3), "float32")
    model.fit(images, np.array(["red heart", "cat face"] * 2), epochs=1, verbose=0)
    folder = str(tmp_path / "out")
    keras_diffusion.to_diffusers(model, folder)
    back = keras_diffusion.from_diffusers(folder, conditioning=text)
    # The U-Net's EMA weights, not the text encoder's that follow them.
    averaged = model.ema.values()[: len(model.denoiser.trainable_variables)]
    for ours, theirs in zip(averaged, back.denoiser.trainable_variables, strict=True):
        np.testing.assert_allclose(theirs, ours, rtol=1e-6, atol=1e-7)
