"""The folder defaults of `TrainConfig`, as docs/quality.md states them."""

import os
import re

import pytest

from keras_diffusion import data as data_lib
from keras_diffusion.models import unet_sizes
from keras_diffusion.run import config as train_config
from keras_diffusion.run import summary

DOC = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "docs",
    "quality.md",
)
SECTION = "### The folder defaults"


def _documented_defaults():
    """`{setting: (cpu, gpu)}` from the table under `SECTION` in the doc."""
    with open(DOC) as f:
        text = f.read()
    assert SECTION in text, f"{DOC} lacks the section {SECTION!r}"
    table = text.split(SECTION, 1)[1]
    rows = re.findall(r"^\| `--([a-z-]+)` \| `([^`]+)` \| `([^`]+)` \|", table, re.M)
    assert rows, "no `--flag` | `cpu` | `gpu` rows under the section"
    return {flag.replace("-", "_"): (cpu, gpu) for flag, cpu, gpu in rows}


@pytest.mark.parametrize("machine", ["cpu", "gpu"])
def test_folder_defaults_are_the_documented_ones(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(unet_sizes, "gpu_present", lambda: machine == "gpu")
    monkeypatch.setattr(train_config, "gpu_present", lambda: machine == "gpu")
    config = train_config.TrainConfig(dataset="folder", data_dir=str(tmp_path))
    resolved = config.resolve().to_dict()
    documented = _documented_defaults()
    assert {"epochs", "learning_rate", "prediction_type", "sampler"} <= set(documented)
    column = 0 if machine == "cpu" else 1
    for name, values in documented.items():
        assert str(resolved[name]) == values[column], (name, machine)


def test_settings_are_taken_and_read_flat_and_recorded_by_section():
    config = train_config.TrainConfig(dataset="digits", epochs=1, sigma_min=0.01)
    assert (config.epochs, config.sigma_min, config.p_mean) == (1, 0.01, None)
    config.sigma_max = 40.0  # a process's setting, set flat, in its section
    assert config.process_settings["sigma_max"] == 40.0
    assert config.to_dict()["sigma_max"] == 40.0
    sections = train_config.TrainConfig(process="edm", sigma_min=0.01).sections()
    assert list(sections) == ["data", "network", "process", "training", "run"]
    assert sections["process"]["name"] == "edm"
    assert sections["process"]["sigma_min"] == 0.01
    assert "beta_schedule" not in sections["process"]
    assert sections["training"]["epochs"] is None
    with pytest.raises(TypeError, match=r"sigma_mni.*Received: sigma_mni=0.01"):
        train_config.TrainConfig(sigma_mni=0.01)


@pytest.mark.parametrize("machine", ["cpu", "gpu"])
def test_a_preset_run_takes_its_machines_recipe_whole_and_records_it(
    machine, monkeypatch
):
    """Without --recipe, mnist takes its cpu recipe where no GPU is found and
    the tutorial's on a GPU; every setting a recipe holds is the run's (no
    fallback fills in for it), and --recipe picks either on any machine."""
    monkeypatch.setattr(train_config, "gpu_present", lambda: machine == "gpu")
    preset = data_lib.get_preset("mnist")
    for asked in (None, "tutorial", "cpu"):
        resolved = train_config.TrainConfig(dataset="mnist", recipe=asked).resolve()
        name = asked or ("tutorial" if machine == "gpu" else "cpu")
        recipe = preset.recipes[name]
        assert resolved.recipe == name
        assert resolved.sections()["data"]["recipe"] == name  # config.json's
        assert resolved.image_size == recipe.image_size
        assert resolved.widths == recipe.model["widths"]
        assert resolved.timesteps == recipe.schedule["num_train_timesteps"]
        for setting, value in recipe.training.items():
            if setting != "sampler":  # None: the process's default, resolved
                assert getattr(resolved, setting) == value, (name, setting)
    # A flag still overrides its recipe's value.
    given = train_config.TrainConfig(dataset="mnist", recipe="cpu", epochs=9)
    assert given.resolve().epochs == 9


def test_every_recipe_decides_every_training_setting():
    for dataset, preset in data_lib.PRESETS.items():
        assert preset.cpu_recipe in (None, *preset.recipes), dataset
        for name, recipe in preset.recipes.items():
            missing = set(data_lib.TRAINING_SETTINGS) - set(recipe.training)
            assert not missing, (dataset, name, missing)
            assert recipe.measured, (dataset, name)


@pytest.mark.parametrize(
    "settings, match",
    [
        (
            {"dataset": "mnist", "recipe": "ddpm"},
            "recipe of dataset='mnist': 'tutorial', 'cpu'",
        ),
        ({"dataset": "folder", "data_dir": "x", "recipe": "cpu"}, "has no preset"),
    ],
)
def test_a_recipe_of_another_dataset_is_refused(settings, match):
    with pytest.raises(ValueError, match=match):
        train_config.TrainConfig(**settings).resolve()


def test_a_run_from_before_recipes_resumes_with_its_presets_first():
    saved = train_config.TrainConfig(dataset="mnist", recipe="tutorial").resolve()
    flat = saved.to_dict()
    del flat["recipe"]
    upgraded = train_config.upgrade(flat)
    assert upgraded["data"]["recipe"] == "tutorial"


def test_a_run_says_which_recipe_it_took_and_the_flag_of_the_other(monkeypatch):
    monkeypatch.setattr(train_config, "gpu_present", lambda: False)
    monkeypatch.setattr(summary, "gpu_present", lambda: False)
    config = train_config.TrainConfig(dataset="mnist").resolve()
    line = summary.recipe_line(config)
    assert line.startswith("Recipe: cpu of mnist, as no GPU is found (")
    assert "28x28, U-Net widths 32,64,128, cosine schedule of T=1000" in line
    assert (
        "The tutorial recipe is --recipe tutorial (32x32, U-Net widths "
        "64,128,256,512, linear schedule of T=200)." in line
    )
    asked = train_config.TrainConfig(dataset="mnist", recipe="tutorial").resolve()
    assert "tutorial of mnist, as asked (--recipe)" in summary.recipe_line(asked)
    # A dataset of one recipe has nothing to choose between: no line.
    digits = train_config.TrainConfig().resolve()
    assert summary.recipe_line(digits) is None
