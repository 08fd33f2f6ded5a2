"""TrainConfig(init_from=...): the checkpoint fixes the model and its schedule."""

import os

import pytest

import keras_diffusion
from keras_diffusion import TrainConfig
from keras_diffusion.run import build
from keras_diffusion.samplers import SAMPLERS

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
SCALE_SHIFT = os.path.join(FIXTURES, "pipeline_scale_shift")


def _config(**kwargs):
    return TrainConfig(dataset="folder", data_dir="images", **kwargs)


def test_checkpoint_architecture_and_schedule_are_kept():
    config = _config(init_from=SCALE_SHIFT).resolve()
    assert (config.image_size, config.channels) == (8, 1)
    assert config.widths == [2, 4] and config.num_res_blocks == 2
    assert (config.schedule, config.timesteps) == ("cosine", 40)
    assert config.prediction_type == "v_prediction"
    assert config.resolve() == config  # a resolved config resolves to itself
    model = build.build_model(config, None, steps_per_epoch=1)
    # The checkpoint's own schedule, zero-terminal-SNR rescaling included.
    assert model.schedule.rescale_zero_terminal_snr
    assert model.prediction_type == "v_prediction"
    assert model.denoiser.resnet_time_scale_shift == "scale_shift"
    # The fine-tuned model samples as its run's grids: the run's sampler.
    assert model.sampler.get_config() == build.build_sampler(config).get_config()
    # Of the checkpoint's algorithm, it keeps the scheduler's settings.
    checkpoint = keras_diffusion.from_diffusers(SCALE_SHIFT).sampler
    name = next(n for n, c in SAMPLERS.items() if type(checkpoint) is c)
    same = _config(init_from=SCALE_SHIFT, sampler=name, sampling_steps=7).resolve()
    model = build.build_model(same, None, steps_per_epoch=1)
    assert model.sampler.get_config() == {**checkpoint.get_config(), "num_steps": 7}


def test_a_schedule_flag_overrides_the_checkpoint_schedule():
    config = _config(init_from=SCALE_SHIFT, schedule="linear", timesteps=100)
    model = build.build_model(config.resolve(), None, steps_per_epoch=1)
    assert model.schedule.num_train_timesteps == 100
    assert not model.schedule.rescale_zero_terminal_snr


def test_the_runs_objective_is_set_on_the_schedule_it_trains():
    # The checkpoint's schedule (v-prediction, zero-terminal SNR) is kept,
    # with the run's prediction type.
    config = _config(init_from=SCALE_SHIFT, prediction_type="sample").resolve()
    model = build.build_model(config, None, steps_per_epoch=1)
    assert model.schedule.rescale_zero_terminal_snr
    assert model.schedule.prediction_type == "sample"
    config = _config(
        image_size=8,
        widths=[4],
        prediction_type="v_prediction",
        loss_weighting="min_snr",
    ).resolve()
    schedule = build.build_model(config, None, steps_per_epoch=1).schedule
    assert (schedule.prediction_type, schedule.loss_weighting) == (
        "v_prediction",
        "min_snr",
    )


@pytest.mark.parametrize("name, value", [("image_size", 16), ("channels", 3)])
def test_a_different_image_size_or_channel_count_names_both(name, value):
    with pytest.raises(ValueError, match=f"`{name}` \\({value}\\) differs .*\\(\\d\\)"):
        _config(init_from=SCALE_SHIFT, **{name: value}).resolve()


def test_an_architecture_flag_is_refused():
    with pytest.raises(ValueError, match="fixes it"):
        _config(init_from=SCALE_SHIFT, widths=[8, 16]).resolve()


CLASSES_3 = os.path.join(FIXTURES, "pipeline_unet_layout")  # num_class_embeds=3


def test_a_checkpoint_without_a_null_class_trains_without_label_dropout():
    config = _config(init_from=CLASSES_3).resolve()
    assert config.class_conditional and config.class_dropout == 0.0
    assert config.guidance_scale == 1.0
    model = build.build_model(config, 3, steps_per_epoch=1)
    assert model.num_classes == 3 and model.class_dropout == 0.0


@pytest.mark.parametrize(
    "name, value", [("class_dropout", 0.1), ("guidance_scale", 2.0)]
)
def test_label_dropout_or_guidance_without_a_null_class_is_refused(name, value):
    with pytest.raises(ValueError, match=f"`{name}` needs a null class.*--"):
        _config(init_from=CLASSES_3, **{name: value}).resolve()


def test_a_vp_checkpoint_is_not_trained_as_edm_without_saying_so():
    with pytest.raises(ValueError, match="VP .*--change-schedule") as info:
        _config(init_from=SCALE_SHIFT, schedule="edm").resolve()
    assert SCALE_SHIFT in str(info.value) and "--schedule" in str(info.value)
    config = _config(init_from=SCALE_SHIFT, schedule="edm", change_schedule=True)
    assert config.resolve().schedule == "edm"
    # Another VP schedule keeps the kind: no flag needed.
    assert _config(init_from=SCALE_SHIFT, schedule="linear").resolve().schedule


@pytest.mark.parametrize(
    "given, flag",
    [({"model_size": "small"}, "--model-size"), ({"latent": "sd-vae"}, "--latent")],
)
def test_a_model_flag_with_init_from_names_only_that_flag(given, flag):
    with pytest.raises(ValueError) as info:
        _config(init_from=SCALE_SHIFT, **given).resolve()
    message = str(info.value)
    assert flag in message and "init_from" in message
    assert ("latent='none'" not in message) and message.count("(--") == 1
