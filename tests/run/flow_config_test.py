"""`TrainConfig` with `schedule="flow"`: what it fixes, what it refuses, and
a flow checkpoint through `init_from`."""

import re

import pytest

from keras_diffusion import DiffusionModel, FlowMatchSchedule, NoiseSchedule
from keras_diffusion.run.build import build_dataset, build_model, build_schedule
from keras_diffusion.run.config import TrainConfig
from tests.denoisers import tiny_unet


def test_flow_fixes_the_prediction_and_defaults_to_dpm_16():
    config = TrainConfig(schedule="flow", shift=3.0).resolve()
    # The digits preset's v-prediction and DPM-20 grid give way to flow's own.
    assert config.prediction_type == "epsilon"
    assert (config.sampler, config.sampling_steps) == ("dpm", 16)
    assert config.beta_start is None and config.beta_end is None
    assert (config.shift, config.timestep_sampling) == (3.0, "logit_normal")
    assert (config.logit_mean, config.logit_std) == (0.0, 1.0)
    schedule = build_schedule(config)
    assert schedule.get_config() == FlowMatchSchedule(shift=3.0).get_config()
    mode = TrainConfig(schedule="flow", timestep_sampling="mode", timesteps=500)
    schedule = build_schedule(mode.resolve())
    assert (schedule.timestep_sampling, schedule.num_train_timesteps) == ("mode", 500)


def test_flow_keeps_a_given_sampler_and_steps():
    config = TrainConfig(schedule="flow", sampler="dpm", sampling_steps=8).resolve()
    assert (config.sampler, config.sampling_steps) == ("dpm", 8)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"prediction_type": "v_prediction"}, "prediction_type='v_prediction'"),
        ({"sampler": "ddim"}, "sampler='ddim'"),
        ({"beta_start": 0.001}, "--beta-start"),
        ({"loss_weighting": "min_snr"}, "--loss-weighting"),
        ({"shift": 0.0}, "shift=0.0"),
        ({"timestep_sampling": "cosine"}, "timestep_sampling='cosine'"),
        ({"logit_std": -1.0}, "logit_std=-1.0"),
    ],
)
def test_bad_flow_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(schedule="flow", **kwargs).resolve()


def test_flow_settings_without_the_flow_schedule_are_refused():
    with pytest.raises(ValueError, match=r"--shift.*schedule='flow'"):
        TrainConfig(shift=3.0).resolve()


def test_init_from_a_flow_checkpoint_keeps_its_schedule(tmp_path):
    schedule = FlowMatchSchedule(shift=2.0, logit_std=0.7)
    path = str(tmp_path / "flow.keras")
    DiffusionModel(tiny_unet(), schedule).save(path)

    def config(**kwargs):
        return TrainConfig(
            dataset="folder", data_dir="images", init_from=path, **kwargs
        )

    resolved = config().resolve()
    assert resolved.schedule == "flow" and resolved.shift == 2.0
    assert resolved.logit_std == 0.7 and resolved.sampler == "dpm"
    model = build_model(resolved, None, steps_per_epoch=1)
    assert model.schedule.get_config() == schedule.get_config()
    # A flag changes one setting and keeps the checkpoint's others.
    model = build_model(config(shift=4.0).resolve(), None, steps_per_epoch=1)
    assert model.schedule.get_config() == {**schedule.get_config(), "shift": 4.0}


@pytest.mark.parametrize(
    "trained, schedule, fragment",
    [
        (NoiseSchedule(), "flow", "flow matching's s \\* T"),
        (FlowMatchSchedule(), "cosine", "VP timesteps"),
        (FlowMatchSchedule(), "edm", "EDM's c_noise"),
    ],
)
def test_a_checkpoint_of_another_kind_is_refused(tmp_path, trained, schedule, fragment):
    path = str(tmp_path / "model.keras")
    DiffusionModel(tiny_unet(), trained).save(path)
    config = TrainConfig(
        dataset="folder", data_dir="images", init_from=path, schedule=schedule
    )
    with pytest.raises(ValueError, match="--change-schedule") as info:
        config.resolve()
    assert "--schedule" in str(info.value)
    assert re.search(fragment, str(info.value)), info.value
    TrainConfig(
        dataset="folder",
        data_dir="images",
        init_from=path,
        schedule=schedule,
        change_schedule=True,
    ).resolve()


def test_a_cache_dir_that_is_a_file_names_the_cache_flag(tmp_path):
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(images / f"{i}.png")
    not_a_folder = tmp_path / "realfile.txt"
    not_a_folder.write_text("x")
    config = TrainConfig(
        dataset="folder", data_dir=str(images), image_size=8, batch_size=2
    ).resolve()
    with pytest.raises(ValueError, match=r"realfile.txt.*\(cache_dir, --cache-dir\)"):
        build_dataset(config, cache_dir=str(not_a_folder))
