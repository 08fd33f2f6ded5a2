"""An export, loaded and run as docs/interop.md says, gives `generate`'s images.

For each kind of sampler `to_diffusers` writes the pipeline class that runs
its scheduler (`DDIMPipeline` for DDIM, `DDPMPipeline` for the others) and
prints one line saying how to call it; that call, from the same starting
noise (and, for the stochastic samplers, the same per-step noise) gives the
images of `model.generate`. Euler and Heun on a VP schedule, which no
unconditional pipeline runs, are refused in one line. Needs torch and
diffusers.
"""

import json
import os
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras_diffusion
from keras_diffusion import FlowMatchSchedule, NoiseSchedule
from keras_diffusion.samplers import (
    DDIMSampler,
    DDPMSampler,
    DPMSolverSampler,
    EulerSampler,
    HeunSampler,
    Sampler,
)
from tests.denoisers import tiny_unet

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
pipeline_ddpm = pytest.importorskip("diffusers.pipelines.ddpm.pipeline_ddpm")
pipeline_ddim = pytest.importorskip("diffusers.pipelines.ddim.pipeline_ddim")
scheduling_ddpm = pytest.importorskip("diffusers.schedulers.scheduling_ddpm")
scheduling_ddim = pytest.importorskip("diffusers.schedulers.scheduling_ddim")

SEED = 3
SHAPE = (8, 8, 3)
# kind: (the model's sampler, its schedule, the pipeline, the call the
# printed line gives besides batch_size).
KINDS = {
    "ddpm": (DDPMSampler(5), NoiseSchedule, "DDPMPipeline", {}),
    "ddim": (DDIMSampler(6), NoiseSchedule, "DDIMPipeline", {"eta": 0.0}),
    # DDIMPipeline passes eta; 7 steps of 1,000 step off the "trailing" list.
    "ddim_eta_trailing": (
        DDIMSampler(7, eta=0.6, timestep_spacing="trailing"),
        NoiseSchedule,
        "DDIMPipeline",
        {"eta": 0.6},
    ),
    # DDPMPipeline's default 1,000 steps would give NaN: the line names 5.
    "dpm": (DPMSolverSampler(5), NoiseSchedule, "DDPMPipeline", {}),
    "flow_dpm": (DPMSolverSampler(5), FlowMatchSchedule, "DDPMPipeline", {}),
}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # Two threads on the shared test machine ran the tiny U-Net 20x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(sampler, schedule):
    unet = tiny_unet(image_shape=SHAPE)
    # Its output convolution starts at zero: random weights make every step
    # move the sample.
    rng = np.random.default_rng(0)
    for variable in unet.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    return keras_diffusion.DiffusionModel(unet, schedule, sampler=sampler, seed=0)


def _generate_noise(batch_size, step=None):
    """`generate`'s starting noise of its first batch for SEED (`step`
    None), or its per-step noise, NCHW for diffusers."""
    seed = tf.constant([SEED, 0], tf.int32)
    shape = (batch_size, *SHAPE)
    if step is None:
        fold = tf.random.experimental.stateless_fold_in(seed, 7)
        noise = tf.random.stateless_normal(shape, seed=fold).numpy()
    else:
        noise = Sampler.step_noise(seed, step, shape).numpy()
    return torch.from_numpy(noise.transpose(0, 3, 1, 2).copy())


def _patch_noise(monkeypatch, batch_size):
    """The pipelines' starting noise and the schedulers' step noise become
    `generate`'s (diffusers draws them from torch)."""
    steps = []

    def step_noise(shape, **kwargs):
        steps.append(None)
        return _generate_noise(batch_size, len(steps) - 1)

    for module in (pipeline_ddpm, pipeline_ddim):
        monkeypatch.setattr(
            module, "randn_tensor", lambda *a, **k: _generate_noise(batch_size)
        )
    for module in (scheduling_ddpm, scheduling_ddim):
        monkeypatch.setattr(module, "randn_tensor", step_noise)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_export_run_as_the_line_says_gives_generates_images(
    kind, tmp_path, monkeypatch, capsys
):
    sampler, schedule, pipeline_name, extra = KINDS[kind]
    model = _model(sampler, schedule())
    ours = model.generate(2, seed=SEED, verbose=0)
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    line = capsys.readouterr().out.strip()
    call = {"num_inference_steps": sampler.num_steps, **extra}
    arguments = ", ".join(f"{k}={v!r}" for k, v in call.items())
    assert "\n" not in line and f"Wrote a {pipeline_name} " in line, line
    assert f"{pipeline_name}.from_pretrained({folder!r})" in line, line
    assert re.search(re.escape(arguments) + r"\) runs", line), line
    with open(os.path.join(folder, "model_index.json")) as file:
        assert json.load(file)["_class_name"] == pipeline_name
    # The contract: DDPMPipeline loads every export.
    assert diffusers.DDPMPipeline.from_pretrained(folder).unet is not None
    pipeline = getattr(diffusers, pipeline_name).from_pretrained(folder)
    _patch_noise(monkeypatch, 2)
    theirs = pipeline(batch_size=2, output_type="np", **call).images
    error = float(np.abs(np.clip(ours / 2 + 0.5, 0, 1) - theirs).max())
    print(f"\n{kind}: {pipeline_name} on the export, max |diff| {error:.2e}")
    assert error < 1e-4


@pytest.mark.parametrize("sampler", [EulerSampler(4), HeunSampler(3)])
def test_euler_and_heun_on_a_vp_schedule_are_refused_in_one_line(sampler, tmp_path):
    model = _model(sampler, NoiseSchedule())
    with pytest.raises(ValueError, match="Argument `sampler`") as error:
        keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    message = str(error.value)
    assert "\n" not in message and "init_noise_sigma" in message
    assert "sampler='ddim', 'dpm' or 'ddpm'" in message
    assert f"sampler={sampler!r}" in message
    assert not (tmp_path / "export").exists()


def test_the_default_export_is_a_ddim_pipeline_ddpm_pipeline_loads(tmp_path):
    # DiffusionModel's default sampler on an epsilon model: DDIM-50.
    model = _model(None, NoiseSchedule())
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "e"), verbose=0)
    pipeline = diffusers.DDPMPipeline.from_pretrained(folder)
    assert type(pipeline.scheduler).__name__ == "DDIMScheduler"
    with open(os.path.join(folder, "model_index.json")) as file:
        assert json.load(file)["_class_name"] == "DDIMPipeline"


def test_a_next_listed_ddim_export_warns_where_diffusers_steps_elsewhere(tmp_path):
    sampler = DDIMSampler(
        7, timestep_spacing="trailing", previous_timestep="next_listed"
    )
    model = _model(sampler, NoiseSchedule())
    with pytest.warns(UserWarning, match="t - T // num_steps") as record:
        keras_diffusion.to_diffusers(model, str(tmp_path / "a"), verbose=0)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    # At 10 steps of 1,000 both rules land on the same timesteps: no warning.
    model.sampler = DDIMSampler(10, previous_timestep="next_listed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        keras_diffusion.to_diffusers(model, str(tmp_path / "b"), verbose=0)
