"""Flow-matching checkpoints through diffusers: to_diffusers writes the
flow scheduler of the model's sampler, DDPMPipeline steps it to our images,
and from_diffusers reads diffusers' flow schedulers back."""

import json
import os

import numpy as np
import pytest

import keras_diffusion
from keras_diffusion import FlowMatchSchedule
from keras_diffusion.samplers import (
    DDIMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
)
from tests.denoisers import tiny_unet


def _flow_model(sampler=None, **schedule_kwargs):
    schedule = FlowMatchSchedule(
        shift=3.0, timestep_sampling="mode", mode_scale=0.8, **schedule_kwargs
    )
    unet = tiny_unet(image_shape=(8, 8, 3))
    return keras_diffusion.DiffusionModel(unet, schedule, sampler=sampler, seed=0)


def _scheduler_config(folder):
    path = os.path.join(folder, "scheduler", "scheduler_config.json")
    with open(path, encoding="utf-8") as file:
        return json.load(file)


@pytest.mark.parametrize(
    "sampler, class_name",
    [
        (None, "DPMSolverMultistepScheduler"),
        (EulerSampler(7), "FlowMatchEulerDiscreteScheduler"),
        (HeunSampler(5), "FlowMatchHeunDiscreteScheduler"),
        (DPMSolverSampler(6, lower_order_final=False), "DPMSolverMultistepScheduler"),
    ],
)
def test_export_and_load_keep_schedule_and_sampler(tmp_path, sampler, class_name):
    model = _flow_model(sampler)
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    config = _scheduler_config(folder)
    assert config["_class_name"] == class_name
    shift = config["flow_shift" if "DPM" in class_name else "shift"]
    assert shift == 3.0
    loaded = keras_diffusion.from_diffusers(folder)
    assert loaded.schedule.get_config() == model.schedule.get_config()
    want = sampler or DPMSolverSampler(16)
    assert loaded.sampler.get_config() == want.get_config()
    np.testing.assert_allclose(
        loaded.generate(2, seed=3, use_ema=False),
        model.generate(2, sampler=want, seed=3, use_ema=False),
        atol=1e-5,
    )


def test_a_ddim_sampler_does_not_export_on_a_flow_model(tmp_path):
    with pytest.raises(ValueError, match="DDIMSampler"):
        keras_diffusion.to_diffusers(
            _flow_model(), str(tmp_path / "export"), sampler=DDIMSampler(4)
        )


@pytest.mark.parametrize("kind", ["euler", "heun"])
def test_ddpm_pipeline_on_an_export_gives_our_samples(tmp_path, monkeypatch, kind):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    from diffusers.pipelines.ddpm import pipeline_ddpm

    sampler = EulerSampler(6) if kind == "euler" else HeunSampler(4)
    model = _flow_model(sampler)
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    pipeline = diffusers.DDPMPipeline.from_pretrained(folder)
    x_T = np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype(np.float32)
    start = torch.from_numpy(x_T.transpose(0, 3, 1, 2).copy())
    monkeypatch.setattr(pipeline_ddpm, "randn_tensor", lambda *a, **k: start.clone())
    theirs = pipeline(
        batch_size=2, num_inference_steps=sampler.num_steps, output_type="np"
    ).images
    ours = sampler.sample(
        lambda x, t: model.denoiser([x, t], training=False), x_T, model.schedule
    ).numpy()
    ours = np.clip(ours / 2 + 0.5, 0.0, 1.0)
    error = float(np.abs(ours - theirs).max())
    print(f"\nDDPMPipeline on a flow export ({kind}): max |diff| {error:.2e}")
    assert error < 1e-4


def _diffusers_folder(tmp_path, scheduler):
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )
    folder = str(tmp_path / "pipe")
    diffusers.DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder)
    return folder


def test_diffusers_flow_schedulers_load_as_their_samplers(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    cases = [
        (diffusers.FlowMatchEulerDiscreteScheduler(shift=2.0), EulerSampler, 2.0),
        (diffusers.FlowMatchHeunDiscreteScheduler(shift=3.0), HeunSampler, 3.0),
        (
            diffusers.DPMSolverMultistepScheduler(
                use_flow_sigmas=True, flow_shift=5.0, prediction_type="flow_prediction"
            ),
            DPMSolverSampler,
            5.0,
        ),
    ]
    for i, (scheduler, sampler_class, shift) in enumerate(cases):
        folder = _diffusers_folder(tmp_path / str(i), scheduler)
        model = keras_diffusion.from_diffusers(folder)
        assert isinstance(model.schedule, FlowMatchSchedule)
        assert model.schedule.shift == shift
        assert type(model.sampler) is sampler_class


def test_a_flow_setting_we_do_not_implement_is_named(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_karras_sigmas=True
    )
    folder = _diffusers_folder(tmp_path, scheduler)
    with pytest.warns(UserWarning, match="use_karras_sigmas=True"):
        model = keras_diffusion.from_diffusers(folder)
    assert isinstance(model.sampler, EulerSampler)
