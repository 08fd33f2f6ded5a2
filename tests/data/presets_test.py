import json

import numpy as np
import pytest
from PIL import Image

from keras_diffusion import NoiseSchedule, UNet
from keras_diffusion.data import DATASET_NAMES, PRESETS, get_preset, make_dataset


def test_each_preset_ends_in_noise_and_builds_its_unet():
    """What a preset promises a run: its schedule leaves (almost) no signal at
    the last step, so sampling from pure noise starts where training ended
    (the reason `_linear_betas` scales DDPM's betas for T=200), and its U-Net
    settings build a network for its images; the digits U-Net is the 0.620 M
    parameters that docs/benchmarks.md measures."""
    assert {"digits", "mnist", "fashion_mnist", "cifar10"} <= set(PRESETS)
    for name, preset in PRESETS.items():
        for recipe_name, recipe in preset.recipes.items():
            where = (name, recipe_name)
            schedule = NoiseSchedule(**recipe.schedule)
            assert np.sqrt(schedule.final_alpha_cumprod) < 0.01, where
            levels = len(recipe.model["widths"])
            assert len(recipe.model["attention_levels"]) == levels, where
            assert recipe.image_size % 2 ** (levels - 1) == 0, where
        config = json.loads(json.dumps(preset.to_dict()))  # plain, for config.json
        assert config == preset.to_dict(), name
    digits = get_preset()
    assert digits.name == "digits"
    unet = UNet(
        (digits.image_size, digits.image_size, digits.channels),
        **digits.model,
        num_classes=digits.num_classes,
    )
    assert round(unet.count_params() / 1e6, 3) == 0.620


def test_get_preset_returns_an_independent_copy():
    preset = get_preset("mnist")
    preset.recipes["tutorial"].model["widths"].append(1024)
    assert PRESETS["mnist"].recipes["tutorial"].model["widths"] == [64, 128, 256, 512]


def test_make_dataset_defaults_to_digits():
    dataset = make_dataset(seed=0)
    batch = next(iter(dataset))
    preset = PRESETS["digits"]
    assert batch.shape == (preset.training["batch_size"], 16, 16, 1)
    assert dataset.class_names == [str(i) for i in range(10)]
    x, y = next(iter(make_dataset("digits", 8, with_labels=True, image_size=12)))
    assert x.shape == (8, 12, 12, 1) and y.shape == (8,)


def test_make_dataset_from_a_folder(tmp_path):
    for name in ("b", "a"):
        (tmp_path / name).mkdir()
        Image.fromarray(np.zeros((9, 9, 3), np.uint8)).save(tmp_path / name / "x.png")
    dataset = make_dataset(
        "folder", 4, data_dir=tmp_path, image_size=8, with_labels=True
    )
    ((x, y),) = list(dataset)
    assert x.shape == (2, 8, 8, 3) and dataset.class_names == ["a", "b"]


def test_make_dataset_reads_captions_only_when_asked(tmp_path):
    Image.fromarray(np.zeros((9, 9, 3), np.uint8)).save(tmp_path / "x.png")
    (tmp_path / "metadata.jsonl").write_text('{"file_name": "x.png", "text": "dark"}')
    (images,) = list(make_dataset("folder", 4, data_dir=tmp_path, image_size=8))
    assert images.shape == (1, 8, 8, 3)
    captioned = make_dataset(
        "folder", 4, data_dir=tmp_path, image_size=8, caption_column="text"
    )
    ((_, captions),) = list(captioned)
    assert captions.numpy().tolist() == [b"dark"]


BAD_INPUT = [
    ({"name": "celeba"}, "`name`.*name='celeba'"),
    ({"name": "folder"}, "`data_dir`.*data_dir=None"),
    ({"name": "mnist", "data_dir": "x"}, "`data_dir`.*data_dir='x'"),
    ({"name": "digits", "channels": 3}, "`channels`.*channels=3"),
    ({"name": "digits", "split": "test"}, "split='test'"),
    ({"name": "digits", "batch_size": -1}, "batch_size=-1"),
    ({"name": "digits", "caption_column": "text"}, "caption_column='text'"),
]


def test_bad_input():
    for kwargs, message in BAD_INPUT:
        with pytest.raises(ValueError, match=message):
            make_dataset(**kwargs)
    with pytest.raises(ValueError, match="name='x'"):
        get_preset("x")
    assert "folder" in DATASET_NAMES
