"""scripts/sample.py: load a .keras model and write a grid, PNGs and an .npz."""

import os

import numpy as np
from PIL import Image

from keras_diffusion import DiffusionModel
from tests.denoisers import tiny_unet


def _save_tiny_model(path, num_classes=None):
    unet = tiny_unet(num_classes=num_classes)
    model = DiffusionModel(unet, num_classes=num_classes, seed=0)
    model.compile(optimizer="adam")
    model.save(path)


def test_sample_writes_grid_pngs_and_npz(sample_script, tmp_path, capsys):
    _save_tiny_model(tmp_path / "m.keras", num_classes=3)
    out = tmp_path / "out"
    argv = [str(tmp_path / "m.keras"), "--num-images", "6", "--steps", "2"]
    argv += ["--sampler", "euler", "--guidance-scale", "2", "--out", str(out)]
    assert sample_script.main([*argv, "--individual", "--npz"]) == 0
    assert str(out / "grid.png") in capsys.readouterr().out
    files = sorted(os.listdir(out))
    assert files == ["00000.png", "00001.png", "00002.png", "00003.png"] + [
        "00004.png",
        "00005.png",
        "grid.png",
        "samples.npz",
    ]
    with np.load(out / "samples.npz") as f:
        assert f["images"].shape == (6, 8, 8, 1) and f["images"].dtype == np.uint8
        np.testing.assert_array_equal(f["labels"], [0, 0, 1, 1, 2, 2])
    with Image.open(out / "grid.png") as grid:
        assert grid.size == (17 * 8, 26 * 8)  # a row per class, upscaled x8
    # The same seed gives the same images.
    assert sample_script.main([*argv, "--npz", "--out", str(tmp_path / "b")]) == 0
    with np.load(out / "samples.npz") as a, np.load(tmp_path / "b/samples.npz") as b:
        np.testing.assert_array_equal(a["images"], b["images"])


def test_sample_bad_input_is_one_line(sample_script, tmp_path, capsys):
    _save_tiny_model(tmp_path / "u.keras")
    cases = [
        ([str(tmp_path / "missing.keras")], "missing.keras"),
        ([str(tmp_path / "u.keras"), "--labels", "1"], "labels"),
        ([str(tmp_path / "u.keras"), "--num-images", "0"], "num_images"),
        ([str(tmp_path / "u.keras"), "--steps", "0"], "num_steps"),
    ]
    for argv, match in cases:
        assert sample_script.main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and match in err[0]
