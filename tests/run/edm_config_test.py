"""`TrainConfig` with `schedule="edm"`: what it fixes, what it refuses."""

import pytest

from keras_diffusion import DiffusionModel, EDMSchedule
from keras_diffusion.run.build import build_model, build_schedule
from keras_diffusion.run.config import TrainConfig
from keras_diffusion.run.training import sampling_cost
from tests.denoisers import tiny_unet


def test_edm_fixes_prediction_type_and_defaults_to_heun_18():
    config = TrainConfig(schedule="edm", sigma_data=0.4, rho=5.0).resolve()
    # The digits preset's v-prediction and DDIM-50 give way to EDM's own.
    assert config.prediction_type == "epsilon"
    assert (config.sampler, config.sampling_steps) == ("heun", 18)
    assert config.beta_start is None and config.beta_end is None
    assert (config.sigma_data, config.rho, config.sigma_max) == (0.4, 5.0, 80.0)
    schedule = build_schedule(config)
    assert isinstance(schedule, EDMSchedule)
    assert schedule.get_config() == EDMSchedule(sigma_data=0.4, rho=5.0).get_config()
    # Heun's 18 steps are 35 model calls of the grid.
    euler = TrainConfig(schedule="edm", sampler="euler", sampling_steps=18).resolve()
    assert sampling_cost(config) == pytest.approx(sampling_cost(euler) * 35 / 18)


def test_edm_keeps_a_given_sampler_and_steps():
    config = TrainConfig(schedule="edm", sampler="dpm", sampling_steps=12).resolve()
    assert (config.sampler, config.sampling_steps) == ("dpm", 12)
    config = TrainConfig(schedule="edm", sampling_steps=9).resolve()
    assert (config.sampler, config.sampling_steps) == ("heun", 9)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"schedule": "edm", "prediction_type": "sample"}, "prediction_type='sample'"),
        ({"schedule": "edm", "sampler": "ddim"}, "sampler='ddim'"),
        ({"schedule": "edm", "beta_end": 0.02}, "beta_end=0.02"),
        ({"schedule": "edm", "sigma_data": 0.0}, "sigma_data"),
        ({"schedule": "edm", "sigma_min": 90.0}, "sigma_min"),
        ({"schedule": "cosine", "sigma_data": 0.3}, "sigma_data=0.3"),
        ({"p_std": 1.0}, "p_std=1.0"),
    ],
)
def test_bad_edm_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(**kwargs).resolve()


def test_init_from_an_edm_checkpoint_keeps_its_schedule(tmp_path):
    unet = tiny_unet()
    schedule = EDMSchedule(sigma_data=0.3, sigma_max=40.0)
    path = str(tmp_path / "edm.keras")
    DiffusionModel(unet, schedule).save(path)

    def config(**kwargs):
        return TrainConfig(
            dataset="folder", data_dir="images", init_from=path, **kwargs
        )

    resolved = config().resolve()
    assert resolved.schedule == "edm" and resolved.sigma_data == 0.3
    assert (resolved.sampler, resolved.prediction_type) == ("heun", "epsilon")
    model = build_model(resolved, None, steps_per_epoch=1)
    assert model.schedule.get_config() == schedule.get_config()
    # A flag changes one setting and keeps the checkpoint's others.
    model = build_model(config(sigma_data=0.6).resolve(), None, steps_per_epoch=1)
    assert model.schedule.get_config() == {**schedule.get_config(), "sigma_data": 0.6}
