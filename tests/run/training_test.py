"""Tests of keras_diffusion.run.training (config, run folder, resume) and images."""

import json
import os
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_diffusion import DiffusionModel, data
from keras_diffusion.callbacks import SampleGrid
from keras_diffusion.run import build, summary, training
from keras_diffusion.run import config as train_config
from keras_diffusion.run import folder as runs
from keras_diffusion.samplers import DDIMSampler
from keras_diffusion.schedules.registry import declared_settings
from keras_diffusion.utils import files, images
from tests.denoisers import conv_denoiser


def test_config_resolves_every_setting_from_the_digits_defaults():
    config = train_config.TrainConfig().resolve()
    values = config.to_dict()
    # The settings of the processes other than the preset's VP are None.
    others = [n for n, (_, owners) in declared_settings().items() if "vp" not in owners]
    may_be_none = (*_MAY_BE_NONE, *others)
    assert all(v is not None for k, v in values.items() if k not in may_be_none)
    preset = data.get_preset("digits")
    for key, value in preset.training.items():
        assert values[key] == value
    assert values["widths"] == preset.model["widths"]
    assert values["timesteps"] == preset.schedule["num_train_timesteps"]
    assert json.loads(json.dumps(values)) == values  # config.json round trip


# A preset has no folder settings (nor captions, nor their text encoder),
# and its own model rather than a named size. `autoencoder_weights` is set
# with --latent only; LoRA with --lora-rank only, a ControlNet with --control.
_MAY_BE_NONE = (
    "caption_column",
    "caption_dropout",
    "text_encoder",
    "text_depth",
    "data_dir",
    "data_path",
    "beta_start",
    "beta_end",
    "background",
    "resize",
    "model_size",
    "autoencoder_weights",
    "init_from",
    "lora_rank",
    "control",
)


def test_a_folder_config_takes_the_folder_defaults(tmp_path):
    import tensorflow as tf

    from keras_diffusion.models.unet_sizes import unet_settings

    config = train_config.TrainConfig(
        dataset="folder", data_dir=str(tmp_path)
    ).resolve()
    size = "base" if tf.config.list_physical_devices("GPU") else "tiny"
    assert (config.background, config.resize, config.model_size) == (
        "white",
        "crop",
        size,
    )
    settings = unet_settings(size, config.image_size)
    assert config.widths == settings["widths"]
    assert config.attention_levels == settings["attention_levels"]
    config = train_config.TrainConfig(
        dataset="folder",
        data_dir=str(tmp_path),
        background=(0, 0, 0),
        model_size="tiny",
        num_res_blocks=3,
        image_size=32,
    ).resolve()
    assert config.background == "black"  # stored as config.json writes it
    assert config.widths == unet_settings("tiny", 32)["widths"]
    assert config.num_res_blocks == 3  # the explicit setting wins


def test_a_short_linear_chain_scales_its_betas_to_end_in_noise():
    from keras_diffusion import NoiseSchedule

    config = train_config.TrainConfig(schedule="linear", timesteps=300).resolve()
    assert config.beta_start == pytest.approx(1e-4 * 1000 / 300)
    assert config.beta_end == pytest.approx(0.02 * 1000 / 300)
    schedule = build.build_schedule(config)
    assert schedule.alphas_cumprod[-1] < 1e-3
    assert NoiseSchedule(300, "linear").alphas_cumprod[-1] > 0.04  # unscaled
    config = train_config.TrainConfig(schedule="linear", timesteps=1000).resolve()
    assert (config.beta_start, config.beta_end) == pytest.approx((1e-4, 0.02))


def test_config_flags_override_the_preset():
    config = train_config.TrainConfig(epochs=3, widths=[8, 16], batch_size=7).resolve()
    assert (config.epochs, config.widths, config.batch_size) == (3, [8, 16], 7)
    assert config.attention_levels == [False, False]


def test_mnist_takes_its_preset_schedule():
    config = train_config.TrainConfig(dataset="mnist", recipe="tutorial").resolve()
    assert config.timesteps == 200 and config.schedule == "linear"
    assert config.beta_end == pytest.approx(0.1)


def test_config_choices_are_the_library_classes():
    from keras_diffusion import samplers
    from keras_diffusion.distribute import strategy as distribute
    from keras_diffusion.models import validation
    from keras_diffusion.schedules import noise_schedule as schedules

    assert train_config.SCHEDULES == (
        *schedules.BETA_SCHEDULES,
        "edm",
        "flow",
        "consistency",
        "meanflow",
    )
    assert train_config.PREDICTION_TYPES is samplers.PREDICTION_TYPES
    assert train_config.STRATEGIES is distribute.STRATEGY_NAMES
    assert train_config.LOSS_WEIGHTINGS is validation.LOSS_WEIGHTINGS
    assert list(train_config.SAMPLERS) == list(samplers.SAMPLERS)
    # diffusers' name of the cosine schedule, as NoiseSchedule takes it.
    config = train_config.TrainConfig(schedule="squaredcos_cap_v2").resolve()
    schedule = build.build_schedule(config)
    cosine = build.build_schedule(train_config.TrainConfig(schedule="cosine").resolve())
    np.testing.assert_array_equal(schedule.betas, cosine.betas)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dataset": "imagenet"}, "dataset='imagenet'"),
        ({"dataset": "folder"}, "data_dir=None"),
        ({"data_dir": "x"}, "data_dir='x'"),
        ({"dataset": "mnist", "data_dir": "x"}, "--data-path"),
        ({"data_path": "x.npz"}, "data_path='x.npz'"),
        ({"epochs": 0}, "epochs=0"),
        ({"batch_size": -1}, "batch_size=-1"),
        ({"timesteps": 1}, "timesteps=1"),
        ({"learning_rate": 0.0}, "learning_rate=0.0"),
        ({"schedule": "cos"}, "schedule='cos'"),
        ({"prediction_type": "eps"}, "prediction_type='eps'"),
        ({"loss_weighting": "snr"}, "loss_weighting='snr'"),
        ({"process": "edm", "min_snr_gamma": 3.0}, "min_snr_gamma=3.0, process='edm'"),
        ({"loss_weighting": "min_snr", "min_snr_gamma": 0.0}, "min_snr_gamma=0.0"),
        ({"ema_decay": 1.0}, "ema_decay=1.0"),
        ({"class_dropout": 1.5}, "class_dropout=1.5"),
        ({"sampler": "plms"}, "sampler='plms'"),
        ({"sampling_steps": 0}, "sampling_steps=0"),
        # Refused too where the process's default sampler would fill it.
        ({"schedule": "flow", "sampling_steps": 0}, "sampling_steps=0"),
        ({"schedule": "edm", "sampling_steps": 0}, "sampling_steps=0"),
        ({"process": "consistency", "sampling_steps": 0}, "sampling_steps=0"),
        ({"sampler": "ddpm", "sampling_steps": 2000}, "sampling_steps=2000"),
        ({"widths": []}, "widths=[]"),
        ({"widths": [8, 16], "attention_levels": [True]}, "attention_levels"),
        ({"class_conditional": False, "guidance_scale": 3.0}, "guidance_scale=3.0"),
        ({"strategy": "tpu"}, "strategy='tpu'"),
        ({"mixed_precision": "fp8"}, "mixed_precision='fp8'"),
        ({"seed": -1}, "seed=-1"),
        ({"steps_per_execution": 0}, "steps_per_execution=0"),
        ({"steps_per_execution": "fast"}, "steps_per_execution='fast'"),
    ],
)
def test_bad_settings_name_the_argument_and_value(kwargs, match):
    with pytest.raises(ValueError, match=match.replace("[", r"\[").replace("]", r"\]")):
        train_config.TrainConfig(**kwargs).resolve()


def test_bad_settings_change_nothing_on_disk(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError):
        training.train(train_config.TrainConfig(epochs=0), out)
    with pytest.raises(ValueError, match="existing folder.*--data-dir"):
        training.train(
            train_config.TrainConfig(dataset="folder", data_dir=str(tmp_path / "no")),
            out,
        )
    assert not out.exists()


# The run folder.


def _config_dict():
    return train_config.TrainConfig(epochs=1).resolve().to_dict()


def test_run_folder_states(tmp_path):
    run = runs.RunFolder(str(tmp_path / "run"))
    assert run.state() == "empty"
    os.makedirs(os.path.join(run.path, runs.CACHE_DIR))
    assert run.state() == "empty"  # a decode cache alone: no run yet
    # config.json's temporary: killed before it was moved into place.
    (tmp_path / "run" / ".config.json.abcd1234.tmp.json").write_text("{")
    assert run.state() == "empty"
    (tmp_path / "run" / "notes.txt").write_text("x")
    assert run.state() == "foreign"
    run.write_config(_config_dict())
    assert run.state() == "interrupted"
    (tmp_path / "run" / "model.keras").write_bytes(b"")
    assert run.state() == "finished"
    os.makedirs(run.backup_dir)
    assert run.state() == "interrupted"


def test_prepare_refuses_a_finished_run_unless_overwrite(tmp_path):
    run = runs.RunFolder(str(tmp_path))
    run.write_config(_config_dict())
    (tmp_path / "model.keras").write_bytes(b"")
    with pytest.raises(ValueError, match="finished run.*--overwrite"):
        runs.prepare_run_folder(tmp_path, _config_dict())
    assert runs.prepare_run_folder(tmp_path, _config_dict(), overwrite=True)[1] is False


def test_prepare_resumes_only_with_the_same_settings(tmp_path):
    run = runs.RunFolder(str(tmp_path))
    run.write_config(_config_dict())
    os.makedirs(run.backup_dir)
    assert runs.prepare_run_folder(tmp_path, _config_dict())[1] is True
    other = dict(_config_dict(), learning_rate=1.0)
    with pytest.raises(ValueError, match=r"other settings \(learning_rate"):
        runs.prepare_run_folder(tmp_path, other)


def test_the_decode_cache_folder_of_a_run(tmp_path):
    folder = train_config.TrainConfig(dataset="folder", data_dir=str(tmp_path))
    digits = train_config.TrainConfig()
    auto = os.path.join(str(tmp_path / "run"), runs.CACHE_DIR)
    assert runs.resolve_cache_dir("auto", folder, tmp_path / "run") == auto
    assert runs.resolve_cache_dir("none", folder, tmp_path) is None
    assert runs.resolve_cache_dir("auto", digits, tmp_path) is None
    assert runs.resolve_cache_dir("c", folder, tmp_path) == "c"
    with pytest.raises(TypeError, match="cache_dir=3"):
        runs.resolve_cache_dir(3, folder, tmp_path)


def test_prepare_refuses_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "photo.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="holds no run"):
        runs.prepare_run_folder(tmp_path, _config_dict())
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="must be a folder"):
        runs.prepare_run_folder(tmp_path / "file", _config_dict())


def test_clear_removes_only_the_run_files(tmp_path):
    run = runs.RunFolder(str(tmp_path))
    run.write_config(_config_dict())
    os.makedirs(run.backup_dir)
    (tmp_path / "mine.txt").write_text("keep")
    run.clear()
    assert sorted(os.listdir(tmp_path)) == ["mine.txt"]


def test_resume_point_reads_the_newest_complete_generation(tmp_path):
    from keras_diffusion.run import backup_folder

    run = runs.RunFolder(str(tmp_path))
    assert run.resume_point() == (0, 0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    for epoch, step in [(1, 0), (1, 3)]:
        backup_folder.commit(run.backup_dir, model.save_weights, epoch, step)
    assert run.resume_point() == (1, 3)
    os.remove(os.path.join(run.backup_dir, "gen-000002.weights.h5"))
    run.check_backup()  # the generation before is whole
    assert run.resume_point() == (1, 0)


def test_remove_leftovers_clears_what_killed_writers_left(tmp_path):
    from keras_diffusion.run import backup_folder

    run = runs.RunFolder(str(tmp_path))
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    backup_folder.commit(run.backup_dir, model.save_weights, 1, 0)
    os.makedirs(run.file(runs.SAMPLES_DIR))
    leftovers = [
        ".data.png.k2j4_9ab.tmp.png",
        os.path.join(runs.SAMPLES_DIR, ".epoch_0001.png.x8f00aab.tmp.png"),
        os.path.join(runs.BACKUP_DIR, "gen-000002.weights.h5"),  # uncommitted
        os.path.join(runs.BACKUP_DIR, ".training_metadata.json.q1w2e3r4.tmp.json"),
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("mine")
    run.remove_leftovers()
    for name in leftovers:
        assert not (tmp_path / name).exists(), name
    assert (tmp_path / "notes.txt").exists() and run.resume_point() == (1, 0)
    run.remove_backup()
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", runs.SAMPLES_DIR]


def test_trim_log_drops_rows_of_epochs_not_in_the_backup(tmp_path):
    run = runs.RunFolder(str(tmp_path))
    (tmp_path / "log.csv").write_text("epoch,loss\n0,1.0\n1,0.5\n2,0.4\n")
    run.trim_log(2)
    assert (tmp_path / "log.csv").read_text().split() == [
        "epoch,loss",
        "0,1.0",
        "1,0.5",
    ]


# Resume: what BackupAndRestore carries.


def _tiny_model(make_unet, seed=0):
    model = DiffusionModel(make_unet(), ema_decay=0.9, seed=seed)
    # Graph mode: quick to compile (XLA, the default, has its own tests).
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False)
    return model


def test_backup_restores_ema_optimizer_and_noise_state(tmp_path, toy_images):
    # A conv denoiser: the state restored is the model's (EMA, optimizer,
    # noise seed), whatever its denoiser, and it traces in a fraction of a
    # U-Net's time.
    backup = str(tmp_path / "backup")
    model = _tiny_model(conv_denoiser)
    model.fit(
        toy_images,
        epochs=2,
        batch_size=16,
        verbose=0,
        callbacks=[keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)],
    )
    saved = {
        "iterations": int(model.optimizer.iterations.numpy()),
        "ema": [np.array(v) for v in model.ema.values()],
        "ema_updates": int(model.ema.num_updates.numpy()),
        "seed": np.array(model.seed_generator.state.value),
        "slots": [np.array(v) for v in model.optimizer.variables],
    }
    assert saved["iterations"] == 8

    fresh = _tiny_model(conv_denoiser, seed=99)
    # fit with epochs equal to the backed-up epoch only restores the state.
    history = fresh.fit(
        toy_images,
        epochs=2,
        batch_size=16,
        verbose=0,
        callbacks=[keras.callbacks.BackupAndRestore(backup, delete_checkpoint=False)],
    )
    assert history.history == {} or not history.history.get("loss")
    assert int(fresh.optimizer.iterations.numpy()) == saved["iterations"]
    assert int(fresh.ema.num_updates.numpy()) == saved["ema_updates"]
    np.testing.assert_array_equal(
        np.array(fresh.seed_generator.state.value), saved["seed"]
    )
    for a, b in zip(fresh.ema.values(), saved["ema"], strict=True):
        np.testing.assert_array_equal(np.array(a), b)
    for a, b in zip(fresh.optimizer.variables, saved["slots"], strict=True):
        np.testing.assert_array_equal(np.array(a), b)


# Images and atomic writes.


def test_make_grid_tiles_row_by_row():
    tiles = np.stack([np.full((2, 3, 1), v) for v in (-1.0, 1.0, 0.0)])
    grid = images.make_grid(tiles, rows=2, padding=1, pad_value=7)
    assert grid.shape == (5, 7, 1) and grid.dtype == np.uint8
    assert grid[0, 0, 0] == 0 and grid[0, 4, 0] == 255 and grid[3, 0, 0] == 128
    assert grid[2, 0, 0] == 7 and grid[3, 4, 0] == 7  # padding, empty tile
    with pytest.raises(ValueError, match="images with shape"):
        images.make_grid(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="rows=0"):
        images.make_grid(tiles, rows=0)


def test_save_grid_writes_a_readable_png(tmp_path):
    path = tmp_path / "grid.png"
    images.save_grid(np.zeros((4, 16, 16, 1)), path)
    with Image.open(path) as image:
        assert image.size == (33 * 4, 33 * 4)  # 2x2 tiles + padding, upscaled x4
    assert os.listdir(tmp_path) == ["grid.png"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "model.keras"
    path.write_bytes(b"good")
    with pytest.raises(RuntimeError):
        with files.atomic_write(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"partial")
            raise RuntimeError("killed")
    assert path.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["model.keras"]


def test_save_model_is_loadable(tmp_path, make_unet):
    model = _tiny_model(make_unet)
    files.save_model(model, tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded, DiffusionModel)
    assert os.listdir(tmp_path) == ["m.keras"]


def test_an_epoch_of_infinite_data_is_refused_not_counted_forever():
    infinite = tf.data.Dataset.range(3).repeat()
    with pytest.raises(ValueError, match="infinite.*steps_per_epoch"):
        build.count_steps(infinite)
    unknown = tf.data.Dataset.range(7).filter(lambda i: i % 2 == 0).batch(2)
    assert int(unknown.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert build.count_steps(unknown) == 2


def test_data_png_shows_each_caption_under_its_image(tmp_path):
    pixels = np.arange(4, dtype=np.uint8)[:, None, None] * np.full((1, 16, 16), 60)
    texts = ["cat face", "green heart", "waving hand sign: dark skin tone", ""]
    dataset = data.from_arrays(pixels.astype(np.uint8), texts, batch_size=4, seed=0)
    batch = next(iter(dataset))
    config = SimpleNamespace(
        data_dir=None,
        dataset="arrays",
        class_conditional=False,
        model_size=None,
        lora_rank=None,
        grad_accum=1,
        batch_size=4,
    )
    model = SimpleNamespace(denoiser=SimpleNamespace(weights=[]))
    path = tmp_path / "data.png"
    line = summary.show_data(config, dataset, model, 1, str(path), batch)
    assert "4 distinct captions" in line
    written = np.asarray(Image.open(path))
    expected = images.caption_grid(batch[0].numpy(), batch[1].numpy())
    np.testing.assert_array_equal(written, expected)


def test_the_grids_of_the_epochs_take_the_final_grids_settings(tmp_path):
    config = train_config.TrainConfig(sample_every=2).resolve()
    run = runs.RunFolder(str(tmp_path))
    sampler = DDIMSampler(num_steps=7)
    controls = np.ones((2, 16, 16, 1))  # a ControlNet run's
    final, fit_callbacks, _ = training._run_callbacks(
        config,
        run,
        (sampler, controls),
        10,
        np.zeros((2, 16, 16, 1)),
        (),
        0,
        print,
        ["a", "b"],
    )
    grids = [c for c in fit_callbacks if isinstance(c, SampleGrid)]
    assert len(grids) == 1
    (progress,) = grids
    assert progress.filepath == run.file(
        os.path.join(runs.SAMPLES_DIR, "epoch_{epoch:04d}.png")
    )
    assert progress.every == 2 and progress.captioned_filepath is None
    assert final.captioned_filepath == run.file(runs.PROMPTS_FILE)
    for name in ("num_images", "seed", "guidance_scale", "log_dir", "prompts"):
        assert getattr(progress, name) == getattr(final, name), name
    np.testing.assert_array_equal(progress.control, final.control)
    np.testing.assert_array_equal(final.control, controls)
    assert progress.sampler is final.sampler is sampler
    assert final.num_images == config.num_samples and final.seed == config.seed
