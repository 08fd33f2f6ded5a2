"""scripts/train.py on an image folder of sprites: what the model sees, and
one-line errors for damaged model files in every script that reads one."""

import os
import re

import numpy as np
import pytest
from PIL import Image

from tests.scripts.conftest import DIGITS_RUN

GARBAGE = (13, 250, 90)  # stored under alpha 0, as real emoji files do


def _sprite(index, size=20):
    """A coloured disc on a transparent ground with garbage colour under it,
    as a palette image: index 0 transparent garbage, index 1 the disc."""
    yy, xx = np.mgrid[:size, :size]
    disc = (yy - size / 2 + 0.5) ** 2 + (xx - size / 2 + 0.5) ** 2 < (size / 3) ** 2
    image = Image.fromarray(disc.astype(np.uint8), "P")
    colour = (40 + 40 * (index % 5), 20, 200 - 30 * (index % 5))
    image.putpalette([*GARBAGE, *colour] + [0] * 762)
    return image


@pytest.fixture
def sprite_folder(tmp_path):
    """Twelve 20x20 sprites: RGBA PNGs, palette PNGs with tRNS, one GIF."""
    folder = tmp_path / "sprites"
    os.makedirs(folder / "nested")
    for index in range(12):
        palette = _sprite(index)
        if index % 3 == 0:  # RGBA, alpha 0 over the garbage colour
            rgba = np.asarray(palette.convert("RGBA")).copy()
            rgba[..., 3] = np.where(np.asarray(palette) == 0, 0, 255)
            Image.fromarray(rgba, "RGBA").save(folder / f"{index:02d}.png")
        elif index % 3 == 1:  # palette PNG with a tRNS chunk
            palette.save(folder / "nested" / f"{index:02d}.PNG", transparency=0)
        else:
            palette.save(folder / f"{index:02d}.gif", transparency=0)
    (folder / "readme.txt").write_text("not an image")
    return folder


def test_folder_run_shows_sprites_on_the_background(
    train_script, tiny, capsys, sprite_folder, tmp_path
):
    out = tmp_path / "run"
    argv = [
        *tiny, "--dataset", "folder", "--data-dir", str(sprite_folder),
        "--image-size", "16", "--model-size", "tiny", "--epochs", "1",
        "--batch-size", "4", "--num-samples", "4", "--output-dir", str(out),
    ]  # fmt: skip
    assert train_script.main(argv) == 0
    stdout = capsys.readouterr().out
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("Data: ")]
    assert f"12 images from {str(sprite_folder)!r} (folder)" in line
    assert "no labels" in line and "16x16x3" in line
    # Darkest: a disc's channel (20 -> -0.84 or 40 -> -0.69, ...); lightest:
    # the white background.
    assert re.search(r"values in \[-0\.\d\d, 1\.00\]", line), line
    grid = np.asarray(Image.open(out / "data.png"))
    # Four 16x16 tiles, 1 pixel apart, upscaled 4x: 4 * (2 * 17 - 1) pixels.
    assert grid.shape == (132, 132, 3)
    for row in (0, 1):
        for col in (0, 1):
            y, x = 4 * 17 * row, 4 * 17 * col
            corner = grid[y : y + 8, x : x + 8]
            assert (corner == 255).all(), corner[0, 0]  # white, not garbage
            centre = grid[y + 28 : y + 36, x + 28 : x + 36]
            assert (centre[..., 1] == 20).all() and (centre[..., 2] >= 80).all()


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        path.write_bytes(b"\0" * len(data))


@pytest.mark.xdist_group("digits_run")
def test_damaged_model_files_give_one_line_errors(
    train_script, sample_script, digits_run, capsys, tmp_path
):
    import shutil

    from keras_diffusion.evaluation import evaluate as evaluation

    # A copy of the session's finished digits run, to damage.
    out = tmp_path / "run"
    shutil.copytree(digits_run, out, ignore=shutil.ignore_patterns("posthoc_ema.*"))
    argv = [*DIGITS_RUN, "--output-dir", str(out)]
    # One run, two damages: a cut copy of its model, then the model itself
    # blanked (the run below resumes next to it).
    for how in ("truncated", "zeroed"):
        model_path = out / "model.keras"
        if how == "truncated":
            model_path = tmp_path / "truncated.keras"
            shutil.copyfile(out / "model.keras", model_path)
        _damage(model_path, how)
        capsys.readouterr()
        code = sample_script.main([str(model_path), "--out", str(tmp_path / how)])
        assert code == 2, how
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "exists" in err, (how, err)
        assert "not a valid .keras archive" in err, (how, err)
        with pytest.raises(ValueError, match="truncated or corrupt"):
            evaluation.evaluate_saved_model(str(model_path), dataset="digits")

    # An interrupted run whose backup weights are damaged, both generations.
    backup = out / "backup"
    os.makedirs(backup)
    for name in ("latest.weights.h5", "latest.weights.h5.bkp"):
        (backup / name).write_bytes(b"\0" * 64)
    (backup / "training_metadata.json").write_text('{"epoch": 1}')
    assert train_script.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "latest.weights.h5" in err
    assert "truncated or corrupt" in err and "--overwrite" in err
