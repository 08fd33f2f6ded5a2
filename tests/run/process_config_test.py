"""A run's process: `--process`, `--beta-schedule`, `--schedule`, each
process's settings, its default sampler and the sampler's fit, all resolved
and checked before anything is written; checkpoints of each process."""

import dataclasses
import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion import (
    ConsistencySchedule,
    DiffusionModel,
    EDMSchedule,
    FlowMatchSchedule,
    NoiseSchedule,
)
from keras_diffusion.data.digits import load_digits_arrays
from keras_diffusion.run import init_from
from keras_diffusion.run.build import (
    build_data_and_model,
    build_dataset,
    build_model,
    build_schedule,
    data_std,
)
from keras_diffusion.run.config import TrainConfig, upgrade
from keras_diffusion.run.summary import sampling_cost
from keras_diffusion.samplers import RePaintSampler
from tests.denoisers import tiny_unet


def test_edm_fixes_prediction_type_and_defaults_to_heun_18():
    config = TrainConfig(schedule="edm", sigma_data=0.4, rho=5.0).resolve()
    # The digits preset's v-prediction and DDIM-50 give way to EDM's own;
    # its preconditioning fixes what the network predicts.
    assert config.prediction_type is None and config.process == "edm"
    assert (config.sampler, config.sampling_steps) == ("heun", 18)
    assert config.beta_start is None and config.beta_end is None
    assert (config.sigma_data, config.rho, config.sigma_max) == (0.4, 5.0, 80.0)
    schedule = build_schedule(config)
    assert isinstance(schedule, EDMSchedule)
    # A run's p_mean is raised from the class's -1.2 (docs/quality.md).
    want = EDMSchedule(sigma_data=0.4, rho=5.0, p_mean=-0.6)
    assert schedule.get_config() == want.get_config()
    # Heun's 18 steps are 35 model calls of the grid.
    euler = TrainConfig(schedule="edm", sampler="euler", sampling_steps=18).resolve()
    assert sampling_cost(config) == pytest.approx(sampling_cost(euler) * 35 / 18)


def test_an_edm_run_takes_sigma_data_from_its_data():
    config = TrainConfig(schedule="edm", epochs=1).resolve()
    # config.json keeps `None` ("the data's"); the run raises p_mean.
    assert (config.sigma_data, config.p_mean) == (None, -0.6)
    _, model, _ = build_data_and_model(config)
    images = load_digits_arrays()[0].astype("float64")  # [-1, 1], as trained
    assert model.schedule.sigma_data == pytest.approx(images.std(), abs=0.02)
    given = TrainConfig(schedule="edm", sigma_data=0.5, epochs=1).resolve()
    assert build_data_and_model(given)[1].schedule.sigma_data == 0.5
    pairs = tf.data.Dataset.from_tensor_slices(
        (np.tile([[-0.2], [0.8]], (8, 1)), np.zeros(16))
    ).batch(4)
    assert data_std(pairs) == pytest.approx(0.5)


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
    assert (resolved.sampler, resolved.prediction_type) == ("heun", None)
    model = build_model(resolved, None, steps_per_epoch=1)
    assert model.schedule.get_config() == schedule.get_config()
    # A flag changes one setting and keeps the checkpoint's others.
    model = build_model(config(sigma_data=0.6).resolve(), None, steps_per_epoch=1)
    assert model.schedule.get_config() == {**schedule.get_config(), "sigma_data": 0.6}


def test_flow_fixes_the_prediction_and_defaults_to_dpm_16():
    config = TrainConfig(schedule="flow", shift=3.0).resolve()
    # The digits preset's v-prediction and DDIM-50 grid give way to flow's
    # own; the network predicts the velocity, and config.json says no other.
    assert config.prediction_type is None and config.process == "flow"
    assert (config.sampler, config.sampling_steps) == ("dpm", 16)
    assert config.beta_start is None and config.beta_end is None
    assert (config.shift, config.timestep_sampling) == (3.0, "logit_normal")
    assert (config.logit_mean, config.logit_std) == (0.0, 1.0)
    schedule = build_schedule(config)
    assert schedule.get_config() == FlowMatchSchedule(shift=3.0).get_config()
    mode = TrainConfig(schedule="flow", timestep_sampling="mode", timesteps=500)
    schedule = build_schedule(mode.resolve())
    assert (schedule.timestep_sampling, schedule.num_train_timesteps) == ("mode", 500)


def test_the_few_step_process_samples_in_two_calls_and_learns_over_the_run():
    config = TrainConfig(schedule="consistency", epochs=3).resolve()
    assert (config.process, config.prediction_type) == ("consistency", None)
    assert (config.sampler, config.sampling_steps) == ("consistency", 2)
    assert (config.consistency_training, config.curriculum_stages) == ("discrete", 8)
    # config.json keeps `None`: the run's length, known once the data is.
    assert config.curriculum_steps is None and config.shift == 1.0
    model = build_model(config, 10, steps_per_epoch=7)
    assert (model.schedule.name, model.schedule.curriculum_steps) == ("consistency", 21)
    given = TrainConfig(process="consistency", curriculum_steps=5).resolve()
    assert build_model(given, 10, steps_per_epoch=7).schedule.curriculum_steps == 5
    # The process's guidance in place of the digits preset's 2.0, unless
    # given; it takes two calls a step: the grid's 2 steps make 4 calls.
    assert config.guidance_scale == 1.5
    given = TrainConfig(schedule="consistency", guidance_scale=2.0).resolve()
    assert given.guidance_scale == 2.0
    unguided = TrainConfig(schedule="consistency", guidance_scale=1.0).resolve()
    assert sampling_cost(config) == pytest.approx(2 * sampling_cost(unguided))
    folder = TrainConfig(dataset="folder", data_dir="x", process="consistency")
    assert folder.resolve().guidance_scale == 1.0  # the preset does not guide


def test_sampling_cost_counts_repaints_jumps():
    repaint = TrainConfig(sampler="repaint", sampling_steps=20).resolve()
    ddim = TrainConfig(sampler="ddim", sampling_steps=20).resolve()
    calls = len(RePaintSampler(20).timesteps(NoiseSchedule()))  # 110: 9 jumps redo 10
    assert sampling_cost(repaint) == pytest.approx(sampling_cost(ddim) * calls / 20)


def test_grad_accum_updates_once_in_k_batches_and_the_curriculum_counts_updates():
    config = TrainConfig(schedule="consistency", epochs=3, grad_accum=4).resolve()
    model = build_model(config, 10, steps_per_epoch=8)
    assert model.optimizer.gradient_accumulation_steps == 4
    # 24 batches are 6 updates: the curriculum's length, in the count it reads.
    assert model.schedule.curriculum_steps == 6
    plain = build_model(TrainConfig(epochs=3).resolve(), 10, steps_per_epoch=8)
    assert plain.optimizer.gradient_accumulation_steps is None
    with pytest.raises(ValueError, match="grad_accum"):
        TrainConfig(grad_accum=0).resolve()


def test_init_from_a_few_step_model_goes_on_at_its_last_stage(tmp_path):
    schedule = ConsistencySchedule(curriculum_steps=1450, curriculum_stages=6)
    path = str(tmp_path / "few.keras")
    DiffusionModel(tiny_unet(), schedule).save(path)
    config = TrainConfig(dataset="folder", data_dir="images", init_from=path)
    resolved = config.resolve()
    # A new run's update count starts at 0: its curriculum would start at
    # flow matching again, undoing the model's consistency.
    assert (resolved.process, resolved.curriculum_steps) == ("consistency", 0)
    built = build_model(resolved, None, steps_per_epoch=5).schedule
    assert built.get_config() == {**schedule.get_config(), "curriculum_steps": 0}
    assert float(built.gap(0)) == 2.0**-5
    again = dataclasses.replace(config, curriculum_steps=40)
    assert build_model(again.resolve(), None, 5).schedule.curriculum_steps == 40
    # Naming the checkpoint's own process changes nothing.
    for named in ({"process": "consistency"}, {"schedule": "consistency"}):
        same = dataclasses.replace(config, **named).resolve()
        assert same.to_dict() == resolved.to_dict(), named


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"schedule": "consistency", "sampler": "dpm"}, "--sampler consistency"),
        ({"schedule": "flow", "sampler": "consistency"}, "--sampler dpm|euler|heun"),
        ({"schedule": "flow", "curriculum_stages": 3}, "--curriculum-stages"),
        ({"schedule": "consistency", "curriculum_stages": 0}, "curriculum_stages"),
        ({"schedule": "consistency", "curriculum_stages": 21}, "at most 20"),
        (
            {"schedule": "consistency", "consistency_training": "continuous"}
            | {"remat": True},
            "`remat` (--remat) does not apply with consistency_training="
            "'continuous' (--consistency-training)",
        ),
        ({"schedule": "consistency", "consistency_training": "jvp"}, "jvp"),
        ({"schedule": "consistency", "loss_weighting": "min_snr"}, "min_snr"),
    ],
)
def test_bad_few_step_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        TrainConfig(**kwargs).resolve()


def test_continuous_consistency_training_takes_a_slow_time_input():
    continuous = {"process": "consistency", "consistency_training": "continuous"}
    # At the preset's T = 1000 it does not train (docstring); at 10 it does.
    assert TrainConfig(**continuous).resolve().timesteps == 10
    assert TrainConfig(process="consistency").resolve().timesteps == 1000
    with pytest.warns(UserWarning, match=r"timesteps=1000 \(--timesteps\)"):
        given = TrainConfig(timesteps=1000, **continuous).resolve()
    assert given.timesteps == 1000


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
        ({"min_snr_gamma": 2.0}, "--min-snr-gamma"),
        ({"shift": 0.0}, "shift=0.0"),
        ({"timestep_sampling": "cosine"}, "timestep_sampling='cosine'"),
        ({"logit_std": -1.0}, "logit_std=-1.0"),
    ],
)
def test_bad_flow_settings(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(schedule="flow", **kwargs).resolve()


def test_flow_settings_without_the_flow_schedule_are_refused():
    owners = r"--shift.*process 'flow', 'consistency' or 'meanflow', not 'vp'"
    with pytest.raises(ValueError, match=owners):
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


def test_process_and_beta_schedule_are_flags_of_their_own():
    # --process and --beta-schedule apart, or both in --schedule, as before.
    for kwargs in (
        {"beta_schedule": "linear"},
        {"process": "vp", "schedule": "linear"},
    ):
        config = TrainConfig(**kwargs).resolve()
        assert (config.process, config.beta_schedule, config.schedule) == (
            "vp",
            "linear",
            "linear",
        )
    config = TrainConfig(process="edm").resolve()
    assert (config.process, config.beta_schedule, config.schedule) == (
        "edm",
        None,
        "edm",
    )
    assert TrainConfig(schedule="flow").resolve().process == "flow"


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"process": "edm", "schedule": "cosine"}, "`process` and `schedule` disagree"),
        ({"process": "flow", "beta_schedule": "linear"}, "beta_schedule='linear'"),
        ({"schedule": "linear", "beta_schedule": "cosine"}, "two beta schedules"),
        ({"process": "subvp"}, "process='subvp'"),
    ],
)
def test_process_flags_that_disagree_are_refused(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(**kwargs).resolve()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"schedule": "flow", "sampler": "repaint"},
        {"process": "edm", "sampler": "repaint"},
        {"process": "flow", "sampler": "ddpm"},
    ],
)
def test_a_sampler_that_does_not_apply_is_refused_before_training(kwargs):
    # Not at the end of training, when samples.png is written: at resolution,
    # naming the flag values that apply.
    with pytest.raises(ValueError, match=r"`sampler` \('\w+'\) does not step on"):
        TrainConfig(**kwargs).resolve()
    with pytest.raises(ValueError, match=r"use --sampler dpm\|euler\|heun"):
        TrainConfig(**kwargs).resolve()


def test_a_folder_run_samples_with_the_default_of_its_prediction_type():
    # docs/quality.md measured DDIM-50 for epsilon models (FD/floor 14.2
    # against DPM-Solver++ 20's 44.9) and DPM-Solver++ 20 for v-prediction.
    folder = {"dataset": "folder", "data_dir": "images"}
    epsilon = TrainConfig(prediction_type="epsilon", **folder).resolve()
    assert (epsilon.sampler, epsilon.sampling_steps) == ("ddim", 50)
    velocity = TrainConfig(**folder).resolve()
    assert velocity.prediction_type == "v_prediction"
    assert (velocity.sampler, velocity.sampling_steps) == ("dpm", 20)


def test_the_few_step_process_trains_its_measured_run_on_the_digits():
    # docs/quality.md, "Few steps": 50 epochs on the digits, not the
    # preset's 25; a run that gives its length keeps it, and the other
    # processes keep the preset's.
    assert TrainConfig(process="consistency").resolve().epochs == 50
    assert TrainConfig(schedule="consistency").resolve().epochs == 50
    assert TrainConfig(process="consistency", epochs=3).resolve().epochs == 3
    assert TrainConfig(process="flow").resolve().epochs == 25
    folder = TrainConfig(process="consistency", dataset="folder", data_dir="x")
    assert (
        folder.resolve().epochs
        == TrainConfig(dataset="folder", data_dir="x").resolve().epochs
    )


def test_a_config_json_of_an_earlier_release_resumes():
    # Before `process` and `beta_schedule`, `schedule` held both; a flow run
    # recorded prediction_type 'epsilon'. Before the few-step process and
    # gradient accumulation, their settings were not recorded. Until the
    # sections, config.json was flat (`to_dict()`); each is read as this
    # release writes the same run (`sections()`).
    added = ("consistency_training", "curriculum_steps", "curriculum_stages")
    added += ("posthoc_ema", "posthoc_snapshots", "lora_rank", "remat")
    for kwargs in ({}, {"schedule": "flow"}, {"schedule": "edm"}):
        resolved = TrainConfig(**kwargs).resolve()
        now, sections = resolved.to_dict(), resolved.sections()
        dropped = ("process", "beta_schedule", "grad_accum", *added)
        before = {k: v for k, v in now.items() if k not in dropped}
        if now["process"] != "vp":
            before["prediction_type"] = "epsilon"
        assert upgrade(json.loads(json.dumps(before))) == sections
        last = {k: v for k, v in now.items() if k not in ("grad_accum", *added)}
        assert upgrade(last) == sections
        assert upgrade(now) == sections
        assert upgrade(json.loads(json.dumps(sections))) == sections


def test_init_from_a_keras_file_starts_from_the_weights_generate_uses(tmp_path):
    model = DiffusionModel(tiny_unet(), NoiseSchedule(), ema_decay=0.5, seed=0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False)
    images = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 1)).astype("float32")
    model.fit(images, epochs=2, batch_size=4, verbose=0)
    live = [v.numpy() for v in model.denoiser.trainable_variables]
    ema = [np.asarray(v) for v in model.ema.values()]
    assert max(np.abs(a - b).max() for a, b in zip(live, ema, strict=True)) > 1e-4
    path = str(tmp_path / "trained.keras")
    model.save(path)
    config = TrainConfig(dataset="folder", data_dir="images", init_from=path)
    resolved = config.resolve()
    built = build_model(resolved, None, steps_per_epoch=1)
    start = [v.numpy() for v in built.denoiser.trainable_variables]
    for got, want in zip(start, ema, strict=True):
        np.testing.assert_array_equal(got, want)
    # Loaded once: the model is built from the checkpoint `resolve` loaded.
    assert resolved.checkpoint.model.denoiser is built.denoiser
    assert isinstance(init_from.load(path).model, DiffusionModel)
