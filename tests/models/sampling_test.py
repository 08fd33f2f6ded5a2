"""`generate`'s sampler argument: a sampler, its name or its config."""

import keras
import numpy as np
import pytest

from keras_diffusion import DDIMSampler, DiffusionModel, NoiseSchedule, samplers
from keras_diffusion.samplers.base import applicable
from tests.denoisers import tiny_unet


@pytest.fixture(scope="module")
def model():
    # One level: the sampler argument does not depend on the depth, and the
    # trace is shorter. One model for the file: each new model traces its
    # own sampling loops; a test that sets its sampler does so with
    # monkeypatch, which puts the model's own back.
    model = DiffusionModel(tiny_unet(widths=(4,)), NoiseSchedule(60, "cosine"), seed=0)
    # Nonzero output weights: a fresh UNet predicts zeros, the same for any
    # sampler, which would hide a sampler swapped for another.
    rng = np.random.default_rng(0)
    for variable in model.denoiser.trainable_variables:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    model.ema.update(model.denoiser.trainable_variables)
    return model


# The samplers that step on the model's VP process.
@pytest.mark.parametrize("name", sorted(applicable(NoiseSchedule())))
def test_generate_takes_a_sampler_name_as_samplers_get_does(model, name):
    by_name = model.generate(2, sampler=name, seed=0, verbose=0)
    by_object = model.generate(2, sampler=samplers.get(name), seed=0, verbose=0)
    np.testing.assert_array_equal(by_name, by_object)


def test_generate_takes_a_sampler_config(model):
    sampler = DDIMSampler(num_steps=3)
    config = keras.saving.serialize_keras_object(sampler)
    np.testing.assert_array_equal(
        model.generate(2, sampler=config, seed=0, verbose=0),
        model.generate(2, sampler=sampler, seed=0, verbose=0),
    )
    # Different steps give different images: the config's steps were used.
    assert not np.allclose(
        model.generate(2, sampler=config, seed=0, verbose=0),
        model.generate(2, sampler="ddim", seed=0, verbose=0),
    )


@pytest.mark.parametrize(
    "sampler, error, fragment",
    [
        ("heunn", ValueError, "sampler='heunn'"),
        (3, TypeError, "sampler=3"),
    ],
)
def test_a_bad_sampler_names_the_argument(model, sampler, error, fragment):
    with pytest.raises(error, match=fragment):
        model.generate(2, sampler=sampler, seed=0, verbose=0)


def _generate(model, **kwargs):
    return model.generate(2, seed=0, verbose=0, **kwargs)


@pytest.mark.parametrize(
    "prediction_type, expected",
    [
        # docs/quality.md, "Default samplers": DPM-Solver++ 20 scores as DDIM
        # does at 50 calls or better, except on epsilon prediction.
        ("v_prediction", samplers.DPMSolverSampler(num_steps=20)),
        ("epsilon", DDIMSampler(num_steps=50)),
    ],
)
def test_the_default_sampler_is_the_measured_one_and_is_saved(
    make_unet, prediction_type, expected, tmp_path
):
    model = DiffusionModel(
        make_unet(widths=(4,)), NoiseSchedule(60, "cosine"), prediction_type, seed=0
    )
    rng = np.random.default_rng(0)
    for variable in model.denoiser.trainable_variables:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    np.testing.assert_array_equal(_generate(model), _generate(model, sampler=expected))
    other = "ddim" if isinstance(expected, samplers.DPMSolverSampler) else "dpm"
    assert not np.allclose(_generate(model), _generate(model, sampler=other))
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.sampler.get_config() == expected.get_config()
    np.testing.assert_allclose(_generate(loaded), _generate(model), atol=1e-6)


def test_a_config_that_records_no_sampler_keeps_ddim_50(model):
    # What files saved before the default was saved with them hold.
    config = model.get_config()
    del config["sampler"]
    legacy = DiffusionModel.from_config(config)
    assert legacy.sampler.get_config() == DDIMSampler(num_steps=50).get_config()


def test_sample_py_samples_with_the_models_own_sampler(model, monkeypatch):
    from keras_diffusion.interop.load import pick_sampler

    monkeypatch.setattr(model, "sampler", samplers.EulerSampler(num_steps=7))
    assert pick_sampler(model, None, None) is model.sampler
    assert pick_sampler(model, None, 3).get_config() == (
        samplers.EulerSampler(num_steps=3).get_config()
    )
    assert pick_sampler(model, "ddim", None).num_steps == 50  # a named one's
    # A diffusers DDPM checkpoint's own: DDIM-50, not all of its T steps.
    monkeypatch.setattr(model, "sampler", samplers.DDPMSampler())
    assert isinstance(pick_sampler(model, None, None, checkpoint=True), DDIMSampler)


def test_a_saved_models_ddpm_sampler_is_its_own(model, tmp_path, monkeypatch):
    # A run of `--sampler ddpm --sampling-steps 3`: sample.py and evaluate.py
    # sample as its grid did, not with a diffusers checkpoint's DDIM-50.
    from keras_diffusion.interop.load import load_for_sampling

    monkeypatch.setattr(model, "sampler", samplers.DDPMSampler(num_steps=3))
    run = tmp_path / "run"
    run.mkdir()
    model.save(str(run / "model.keras"))
    for source in (run, run / "model.keras"):
        _, sampler, _ = load_for_sampling(str(source))
        assert sampler.get_config() == model.sampler.get_config(), source


def test_the_guidance_a_run_records_travels_in_the_keras_file(model, tmp_path):
    # A post-hoc model written outside its run folder (posthoc_ema.py --out)
    # samples at the run's guidance, not at 1.
    import json

    from keras_diffusion.interop.load import load_for_sampling

    recorded = DiffusionModel.from_config({**model.get_config(), "guidance_scale": 2.0})
    recorded.save(str(tmp_path / "ema.keras"))
    assert load_for_sampling(str(tmp_path / "ema.keras"))[2] == 2.0
    # In a run folder, the file's wins; its config.json serves a file that
    # records none (an earlier release's).
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"guidance_scale": 3.0}))
    recorded.save(str(run / "model.keras"))
    assert load_for_sampling(str(run))[2] == 2.0
    model.save(str(run / "model.keras"))
    assert "guidance_scale" not in model.get_config()
    assert load_for_sampling(str(run))[2] == 3.0
    assert load_for_sampling(str(run), guidance_scale=1.5)[2] == 1.5
