"""from_diffusers / to_diffusers against diffusers' own outputs, without torch.

The fixtures (tests/interop/make_fixtures.py) are tiny random UNet2DModels
saved by diffusers, with the outputs diffusers computed for them.
"""

import json
import os

import keras
import numpy as np
import pytest

import keras_diffusion
from keras_diffusion import interop

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
NAMES = sorted(
    name for name in os.listdir(FIXTURES) if os.path.isdir(os.path.join(FIXTURES, name))
)


def _reference(name):
    folder = os.path.join(FIXTURES, name)
    arrays = dict(np.load(os.path.join(folder, "reference.npz")))
    with open(os.path.join(folder, "reference.json")) as file:
        arrays.update(json.load(file))
    return folder, arrays


def _inputs(ref):
    inputs = [ref["x"], ref["t"]]
    if "labels" in ref:
        inputs.append(ref["labels"])
    return inputs


def _relative_error(out, ref):
    return float(np.max(np.abs(np.asarray(out) - ref)) / np.max(np.abs(ref)))


def _ema_output(model, inputs):
    out, _ = model.denoiser.stateless_call(
        model.ema.values(),
        [v.value for v in model.denoiser.non_trainable_variables],
        inputs,
        training=False,
    )
    return out


@pytest.fixture(scope="module", params=NAMES)
def loaded(request):
    folder, ref = _reference(request.param)
    return request.param, keras_diffusion.from_diffusers(folder), ref


def test_outputs_equal_diffusers_for_live_and_ema_weights(loaded):
    name, model, ref = loaded
    assert model.denoiser.count_params() == int(ref["num_params"]), name
    inputs = _inputs(ref)
    assert _relative_error(model.denoiser(inputs, training=False), ref["output"]) < 1e-4
    assert _relative_error(_ema_output(model, inputs), ref["output"]) < 1e-4


def test_schedule_prediction_type_and_clip_come_from_the_scheduler(loaded):
    name, model, ref = loaded
    # diffusers rescales to zero terminal SNR in float32, here in float64.
    np.testing.assert_allclose(model.schedule.betas, ref["betas"], rtol=1e-4)
    assert model.schedule.prediction_type == ref["prediction_type"]
    sampler = interop.default_sampler(model)
    assert sampler.clip_sample == ref["clip_sample"]


def test_the_scheduler_is_generates_default_and_survives_keras(tmp_path):
    # A DDIMScheduler(timestep_spacing="trailing", steps_offset=1), clipped.
    model = keras_diffusion.from_diffusers(
        os.path.join(FIXTURES, "pipeline_suite_tester")
    )
    # Graph-mode sampling: this test is about which sampler generate runs,
    # and three 50-step loops compiled with XLA were most of its time (XLA
    # sampling: tests/trainers/xla_test.py). Compiled, the loaded model keeps it.
    model.compile(jit_compile=False)
    own = keras_diffusion.DDIMSampler(
        num_steps=50, timestep_spacing="trailing", steps_offset=1, clip_sample=True
    )
    assert model.sampler.get_config() == own.get_config()
    expected = model.generate(2, sampler=own, seed=0, verbose=0)
    np.testing.assert_array_equal(model.generate(2, seed=0, verbose=0), expected)
    assert not np.array_equal(
        model.generate(2, sampler="ddim", seed=0, verbose=0), expected
    )
    path = str(tmp_path / "loaded.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.sampler.get_config() == own.get_config()
    np.testing.assert_array_equal(loaded.generate(2, seed=0, verbose=0), expected)


def test_bare_unet_folder_gets_ddpm_scheduler_defaults():
    model = keras_diffusion.from_diffusers(
        os.path.join(FIXTURES, "unet_diffusers_defaults")
    )
    schedule = model.schedule
    assert (schedule.num_train_timesteps, schedule.beta_schedule) == (1000, "linear")
    assert (schedule.beta_start, schedule.beta_end) == (1e-4, 0.02)
    assert model.prediction_type == "epsilon"
    # DDPMPipeline's sampling: DDPMScheduler's defaults, all T steps.
    expected = keras_diffusion.DDPMSampler(clip_sample=True)
    assert model.sampler.get_config() == expected.get_config()
    assert interop.default_sampler(model).clip_sample is True


def test_export_round_trip_keeps_outputs_config_and_schedule(loaded, tmp_path):
    name, model, ref = loaded
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / name))
    source = os.path.join(FIXTURES, name)
    source_unet = source if name.startswith("unet_") else os.path.join(source, "unet")
    with open(os.path.join(source_unet, "config.json")) as file:
        original = json.load(file)
    with open(os.path.join(folder, "unet", "config.json")) as file:
        exported = json.load(file)
    # The options that shape the network survive (up to the "UNetRes" alias).
    for key in ("block_out_channels", "layers_per_block", "norm_num_groups"):
        assert exported[key] == original[key], key
    for key in ("flip_sin_to_cos", "freq_shift", "downsample_padding", "norm_eps"):
        assert exported[key] == original[key], key
    reloaded = keras_diffusion.from_diffusers(folder)
    inputs = _inputs(ref)
    assert _relative_error(reloaded.denoiser(inputs), ref["output"]) < 1e-4
    np.testing.assert_array_equal(reloaded.schedule.betas, model.schedule.betas)
    assert reloaded.prediction_type == model.prediction_type
    assert interop.default_sampler(reloaded).clip_sample == ref["clip_sample"]


@pytest.fixture(scope="module")
def trained():
    """The pipeline fixture after one Adam step: the EMA (decay 0.1 on its
    first update) then sits a tenth of the step behind the live weights.

    Trained once for the tests that read it (export, generate, save), which
    leave its weights as they are."""
    model = keras_diffusion.from_diffusers(
        os.path.join(FIXTURES, "pipeline_unet_layout"), seed=0
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    images = np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 1)).astype("float32")
    labels = np.array([0, 1, 1, 0], "int32")
    before = _live(model)
    history = model.fit(images, labels, batch_size=4, epochs=1, verbose=0)
    return model, history, before


def _live(model):
    return [v.numpy() for v in model.denoiser.trainable_variables]


def _ema(model):
    return [np.asarray(v) for v in model.ema.values()]


def _assert_equal(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)


def test_export_writes_the_ema_or_the_live_weights_and_load_restores_them(
    trained, tmp_path
):
    model = trained[0]
    live, ema = _live(model), _ema(model)
    # (A few variables get no gradient, such as unused class embeddings.)
    moved = [not np.allclose(a, b, atol=1e-6) for a, b in zip(live, ema, strict=True)]
    # 130 or 131 of 145 (float rounding decides a tiny gradient's step).
    assert sum(moved) > 0.85 * len(moved), f"{sum(moved)} of {len(moved)} moved"
    default = keras_diffusion.to_diffusers(model, str(tmp_path / "default"))
    ema_folder = keras_diffusion.to_diffusers(
        model, str(tmp_path / "ema"), use_ema=True
    )
    live_folder = keras_diffusion.to_diffusers(
        model, str(tmp_path / "live"), use_ema=False
    )
    weights = os.path.join("unet", "diffusion_pytorch_model.safetensors")
    with open(os.path.join(default, weights), "rb") as a:
        with open(os.path.join(ema_folder, weights), "rb") as b:
            assert a.read() == b.read()  # the default is the EMA
    for folder, expected in ((live_folder, live), (ema_folder, ema)):
        loaded = keras_diffusion.from_diffusers(folder)
        # The file holds one set of weights: the live weights and the EMA of
        # the loaded model both start from it.
        _assert_equal(_live(loaded), expected)
        _assert_equal(_ema(loaded), expected)
    # The EMA export computes what the EMA weights compute here.
    inputs = _inputs(_reference("pipeline_unet_layout")[1])
    np.testing.assert_allclose(
        loaded.denoiser(inputs), _ema_output(model, inputs), rtol=1e-4, atol=1e-5
    )


def test_loaded_model_fits_generates_and_saves(trained, tmp_path):
    model, history, before = trained
    assert np.isfinite(history.history["loss"][0])
    assert any(
        not np.array_equal(a, b) for a, b in zip(before, _live(model), strict=True)
    )
    sampler = interop.default_sampler(model, num_steps=3)
    samples = model.generate(2, sampler=sampler, labels=[0, 1], seed=1)
    assert samples.shape == (2, 8, 8, 1) and np.all(np.abs(samples) <= 1.0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    # Both sets of weights come back, each in its place.
    _assert_equal(_live(restored), _live(model))
    _assert_equal(_ema(restored), _ema(model))
    np.testing.assert_array_equal(
        restored.generate(2, sampler=sampler, labels=[0, 1], seed=1), samples
    )


def test_a_unet_without_mid_block_round_trips(tmp_path, make_unet):
    # diffusers' mid_block_type=None: the down path feeds the up path.
    unet = make_unet(
        widths=(4, 8),
        attention_levels=(False, True),
        attention_head_dim=3,
        mid_block=False,
    )
    assert not any(layer.name.startswith("mid_") for layer in unet.layers)
    rng = np.random.default_rng(0)
    for variable in unet.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    model = keras_diffusion.DiffusionModel(unet, keras_diffusion.NoiseSchedule(100))
    folder = keras_diffusion.to_diffusers(model, str(tmp_path / "export"))
    with open(os.path.join(folder, "unet", "config.json")) as file:
        config = json.load(file)
    assert config["mid_block_type"] is None and config["attention_head_dim"] == 3
    reloaded = keras_diffusion.from_diffusers(folder)
    assert reloaded.denoiser.get_config()["mid_block"] is False
    x = rng.normal(size=(2, 8, 8, 1)).astype("float32")
    t = np.array([3.0, 70.5], "float32")
    np.testing.assert_array_equal(reloaded.denoiser([x, t]), unet([x, t]))
    with pytest.raises(ValueError, match="mid_attention=True, mid_block=False"):
        make_unet(mid_attention=True, mid_block=False)
