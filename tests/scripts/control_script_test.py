"""`train.py --init-from RUN --control silhouette` trains a ControlNet of a
run; `sample.py RUN --control-images DIR` draws under given controls."""

import keras
import numpy as np
import pytest
from PIL import Image

import keras_diffusion as kd

pytestmark = pytest.mark.xdist_group("digits_run")


def _pngs(folder, size, count=2):
    folder.mkdir()
    for i in range(count):
        mask = np.zeros((size, size), np.uint8)
        mask[1 + i : size - 1, 2 : size - 2] = 255
        Image.fromarray(mask).save(folder / f"{i}.png")
    return folder


def _grid_pixels(path):
    """A grid of 8x8 tiles, upscaled 8 times, at one pixel a pixel (grey)."""
    with Image.open(path) as grid:
        return np.asarray(grid.convert("L"))[::8, ::8]


def test_a_run_trains_a_controlnet_of_a_run_and_samples_under_controls(
    digits_run, tmp_path, capsys
):
    from tests.conftest import load_script

    folder = tmp_path / "control"
    argv = ["--init-from", str(digits_run), "--control", "silhouette", "--epochs", "1"]
    argv += ["--posthoc-ema", "--posthoc-snapshots", "1", "--num-samples", "2"]
    argv += ["--sampling-steps", "1", "--jit-compile", "false", "--image-size", "8"]
    assert load_script("train").main([*argv, "--output-dir", str(folder)]) == 0
    assert "M parameters, frozen; a ControlNet of " in capsys.readouterr().out
    assert (folder / "samples.png").is_file()
    # data.png: each training image after its control, four pairs a row (8x8
    # tiles upscaled 8 times, 1 pixel between them): the controls in black
    # and white, the digits greyscale, each control the digit's silhouette.
    pixels = _grid_pixels(folder / "data.png")
    assert pixels.shape == (8 * 9 - 1, 8 * 9 - 1)
    tiles = np.pad(pixels, ((0, 1), (0, 1))).reshape(8, 9, 8, 9)[:, :8, :, :8]
    tiles = tiles.transpose(0, 2, 1, 3).reshape(-1, 2, 8, 8)
    controls, digits = tiles[:, 0], tiles[:, 1]
    assert set(np.unique(controls)) == {0, 255}
    # The silhouette: 0.2 over the black background of [-1, 1] (25.5 in
    # uint8; the digits' 17 grey levels fall 16 apart there).
    np.testing.assert_array_equal(controls == 255, digits > 25)
    # The run's grid: each sample after the control it was drawn under.
    pixels = _grid_pixels(folder / "samples.png")
    columns, rows = ((size + 1) // 9 for size in pixels.shape[::-1])
    assert columns % 2 == 0 and rows * columns // 2 == 2  # --num-samples 2
    first = pixels[:8, :8]
    assert set(np.unique(first)) == {0, 255}
    tuned = keras.saving.load_model(folder / "model.keras")
    assert tuned.controlnet.extractor["name"] == "silhouette"
    # The frozen U-Net is the run's EMA, bit for bit; the ControlNet trained.
    source = keras.saving.load_model(digits_run / "model.keras")
    for a, b in zip(tuned.denoiser.weights, source.ema.values(), strict=True):
        np.testing.assert_array_equal(a.numpy(), np.asarray(b))
    assert kd.posthoc_ema(str(folder), 0.1).controlnet is not None
    # A ControlNet run is not a base to start from: its ControlNet would go.
    again = tmp_path / "again"
    argv = ["--init-from", str(folder), "--epochs", "1", "--output-dir", str(again)]
    capsys.readouterr()
    assert load_script("train").main(argv) == 2
    error = capsys.readouterr().err
    assert "--init-from" in error and "holds a ControlNet model" in error
    assert not again.exists()

    _judged_by_the_benchmark(folder, tmp_path)

    sample = load_script("sample")
    controls = _pngs(tmp_path / "controls", 8)
    out = tmp_path / "samples"
    argv = [str(folder), "--control-images", str(controls), "--num-images", "4"]
    argv += ["--steps", "1", "--labels", "3", "--npz", "--out", str(out)]
    assert sample.main(argv) == 0
    assert (out / "grid.png").is_file()
    capsys.readouterr()
    assert sample.main([str(folder), "--steps", "1", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "--control-images" in error and error.count("\n") == 1
    big = _pngs(tmp_path / "big", 16, count=1)
    assert sample.main([str(folder), "--control-images", str(big)]) == 2
    error = capsys.readouterr().err
    assert "0.png is 16x16; the ControlNet takes 8x8" in error


def _judged_by_the_benchmark(run, tmp_path):
    # benchmarks/control_quality.py --run: half A's controls, each scale's
    # IoU and F1 of the samples' own controls, FD/floor against half B.
    from tests.conftest import load_script

    load_script("benchmark")  # puts benchmarks/ on the import path
    from benchmarks import control_quality

    held_out = _pngs(tmp_path / "held_out", 8, count=6)
    path = tmp_path / "control.json"
    argv = ["--run", str(run), "--held-out", str(held_out), "--json", str(path)]
    results = control_quality.main(argv)
    assert results["num_samples"] == 3  # half of the 6
    assert sorted(results["scales"]) == [0.0, 0.5, 1.0, 1.5]
    for row in results["scales"].values():
        assert 0 <= row["iou"] <= row["f1"] <= 1 and np.isfinite(row["fd_ratio"])
    assert path.is_file()
    masks = np.zeros((2, 4, 4, 1))
    masks[:, :2] = 1  # 8 pixels each; a control of its top 4 and 4 others
    controls = np.zeros_like(masks)
    controls[:, 0], controls[:, 2] = 1, 1
    assert control_quality.iou(masks, controls) == 4 / 12
    assert control_quality.f1(masks, controls) == 2 * 4 / 16


def test_control_without_a_run_to_steer_is_refused_before_a_write(tmp_path, capsys):
    from tests.conftest import load_script

    folder = tmp_path / "never"
    argv = ["--control", "edges", "--epochs", "1", "--output-dir", str(folder)]
    assert load_script("train").main(argv) == 2
    error = capsys.readouterr().err
    assert "--control" in error and "--init-from" in error
    assert error.count("\n") == 1
    assert not folder.exists()
