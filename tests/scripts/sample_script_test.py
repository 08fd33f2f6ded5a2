"""scripts/sample.py: load a .keras model and write a grid, PNGs and an .npz."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from keras_diffusion import DiffusionModel, TextConditioning
from keras_diffusion.utils import run_files
from tests.denoisers import conv_denoiser, tiny_unet


def _save_tiny_model(path, num_classes=None):
    unet = tiny_unet(num_classes=num_classes)
    model = DiffusionModel(unet, num_classes=num_classes, seed=0)
    model.compile(optimizer="adam")
    model.save(path)


def _save_tiny_text_model(path):
    """A text model (untrained: its refusals and files are those of any)."""
    conditioning = TextConditioning(6, 64, 8, 1, 2)
    conditioning.adapt(["red heart", "cat face"])
    denoiser = conv_denoiser(context_shape=(6, 8))
    DiffusionModel(denoiser, conditioning=conditioning, seed=0).save(path)
    return str(path)


def _text_run_folder(folder):
    """A text run's folder as sample.py reads it before the model loads:
    its prompts.json, and a model.keras that does not load (a refusal must
    come first)."""
    folder.mkdir()
    (folder / run_files.MODEL_FILE).write_bytes(b"not a model")
    (folder / run_files.RUN_PROMPTS_FILE).write_text(json.dumps(["cat face", "dog"]))
    return str(folder)


def _refused(sample_script, argv, out, capsys):
    """The one line of sample.py's refusal of `argv`; nothing written."""
    assert sample_script.main([*argv, "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "Argument `" not in line, line
    assert not out.exists()
    return line


def test_the_flags_default_as_the_library_samples(sample_script):
    # sample.py parses before TensorFlow loads, so it holds a copy of the
    # library's defaults; --no-ema is `use_ema`.
    import dataclasses
    import inspect

    from keras_diffusion.run import generation

    fields = dataclasses.fields(generation.SamplingOptions)
    library = {f.name: f.default for f in fields if f.name != "use_ema"}
    parameters = inspect.signature(generation.sample_to_files).parameters
    num_images = parameters["num_images"].default
    assert sample_script.DEFAULTS == {"num_images": num_images, **library}
    with pytest.raises(TypeError, match="smapler"):
        generation.sample_to_files("m.keras", "out", smapler="ddim")


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
        ([str(tmp_path / "u.keras"), "--labels", "1"], "--labels"),
        ([str(tmp_path / "u.keras"), "--num-images", "0"], "--num-images 0"),
    ]
    for argv, match in cases:
        assert sample_script.main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and match in err[0]
        assert "Argument `" not in err[0]  # the flag typed, not a Python name
    # A count out of range is the parser's answer, before TensorFlow loads.
    with pytest.raises(SystemExit) as info:
        sample_script.main([str(tmp_path / "u.keras"), "--steps", "0"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.splitlines()) == 2
    assert "argument --steps: expected an int of at least 1, got '0'" in err


def test_a_sampler_the_schedule_refuses_is_named_by_its_flag_values(
    sample_script, tmp_path, capsys
):
    from keras_diffusion import EDMSchedule

    path = tmp_path / "edm.keras"
    DiffusionModel(tiny_unet(), EDMSchedule(), seed=0).save(path)
    assert sample_script.main([str(path), "--sampler", "ddim"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "the samplers that do: dpm|euler|heun. Received: --sampler ddim" in line
    assert "Sampler" not in line, line  # no class names


def test_a_run_samples_with_its_guidance_and_says_how(sample_script, tmp_path, capsys):
    # The run's grid used guidance 2 with one class a row; sample.py given
    # the run does the same by default, and says so in one line.
    run = tmp_path / "run"
    run.mkdir()
    model = DiffusionModel(tiny_unet(num_classes=2), seed=0)
    model.save(run / "model.keras")
    (run / "config.json").write_text('{"guidance_scale": 2.0}')
    code = sample_script.main([str(run), "--num-images", "2", "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("Sampling"))
    assert "--sampler ddim --steps 2 (4 model calls an image)" in line
    assert "--guidance-scale 2, labels a row a class" in line


def _digit_files(folder, count):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        pixels = (rng.uniform(size=(12, 10)) * 255).astype(np.uint8)  # resized to 8x8
        Image.fromarray(pixels).save(folder / f"{i:02d}.png")


def test_init_images_with_a_mask_fill_the_white(sample_script, tmp_path, capsys):
    _save_tiny_model(tmp_path / "u.keras")
    _digit_files(tmp_path / "in", 3)
    mask = np.zeros((8, 8), np.uint8)
    mask[4:] = 255  # white fills the bottom half
    Image.fromarray(mask).save(tmp_path / "mask.png")
    argv = [str(tmp_path / "u.keras"), "--init-images", str(tmp_path / "in")]
    argv += ["--steps", "3", "--out", str(tmp_path / "o"), "--npz"]
    assert sample_script.main([*argv, "--mask", str(tmp_path / "mask.png")]) == 0
    with np.load(tmp_path / "o" / "edits.npz") as f:
        inputs, images = f["inputs"], f["images"]
    assert inputs.shape == images.shape == (3, 8, 8, 1)
    np.testing.assert_array_equal(images[:, :4], inputs[:, :4])  # kept
    assert np.abs(images[:, 4:].astype(int) - inputs[:, 4:]).mean() > 5  # filled
    with Image.open(tmp_path / "o" / "grid.png") as grid:
        assert grid.size == (26 * 8, 17 * 8)  # inputs over results, upscaled x8
    # img2img at strength 0 keeps the images.
    argv[-2] = str(tmp_path / "s")
    assert sample_script.main([*argv, "--strength", "0"]) == 0
    with np.load(tmp_path / "s" / "edits.npz") as f:
        np.testing.assert_array_equal(f["images"], f["inputs"])


def test_editing_flags_that_do_not_fit_are_one_line(sample_script, tmp_path, capsys):
    _save_tiny_model(tmp_path / "u.keras")
    _digit_files(tmp_path / "in", 2)
    model, images = str(tmp_path / "u.keras"), str(tmp_path / "in")
    cases = [
        ([model, "--init-images", images], "exactly one of --strength"),
        ([model, "--init-images", images, "--strength", "1.5"], "--strength 1.5"),
        (
            [model, "--init-images", str(tmp_path / "nope"), "--strength", "0.5"],
            "--init-images",
        ),
        (
            [model, "--init-images", images, "--mask", str(tmp_path / "none.png")],
            "--mask",
        ),
    ]
    # Masks neither of the images' size (10x12) nor the model's (8x8).
    for width, height in ((20, 20), (64, 64), (48, 16)):
        path = tmp_path / f"mask{width}x{height}.png"
        Image.fromarray(np.full((height, width), 255, np.uint8)).save(path)
        expected = "--mask must have the size of its image (10x12) or the model's"
        cases.append(([model, "--init-images", images, "--mask", str(path)], expected))
    for argv, match in cases:
        assert sample_script.main([*argv, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and match in err[0], err
    with pytest.raises(SystemExit):  # argparse: --strength edits --init-images
        sample_script.main([model, "--strength", "0.5"])
    assert "--init-images" in capsys.readouterr().err


def test_labels_on_a_text_model_are_refused_first_naming_prompt(
    sample_script, tmp_path, capsys
):
    # A text run's folder is refused before its model loads, the loaded
    # text model after; --labels first, not a missing --prompt.
    run = _text_run_folder(tmp_path / "run")
    model = _save_tiny_text_model(tmp_path / "t.keras")
    _digit_files(tmp_path / "in", 2)
    edit = ["--init-images", str(tmp_path / "in"), "--strength", "0.5"]
    for argv in (
        [run, "--labels", "1"],
        [run, "--labels", "1", "--prompt", "cat"],
        [run, *edit, "--labels", "1"],
        [model, "--labels", "1"],
        [model, *edit, "--labels", "1"],
    ):
        line = _refused(sample_script, argv, tmp_path / "o", capsys)
        assert "--labels" in line and "takes --prompt" in line, (argv, line)
        assert "Received: --labels [1]" in line and "None" not in line, line


def test_editing_a_text_model_without_a_prompt_is_refused_as_sampling_is(
    sample_script, tmp_path, capsys
):
    run = _text_run_folder(tmp_path / "run")
    model = _save_tiny_text_model(tmp_path / "t.keras")
    _digit_files(tmp_path / "in", 2)
    Image.fromarray(np.full((8, 8), 255, np.uint8)).save(tmp_path / "mask.png")
    edits = [
        ["--init-images", str(tmp_path / "in"), "--strength", "0.5"],
        ["--init-images", str(tmp_path / "in"), "--mask", str(tmp_path / "mask.png")],
    ]
    for argv in ([run], *([run, *edit] for edit in edits)):
        line = _refused(sample_script, argv, tmp_path / "o", capsys)
        assert "--prompt" in line and "'cat face'" in line, (argv, line)
    for edit in edits:  # a text model outside a run folder: after it loads
        line = _refused(sample_script, [model, *edit], tmp_path / "o", capsys)
        assert "samples prompts: pass at least one. Received: --prompt None" in line


def test_editing_takes_a_prompt_for_all_or_one_an_image_of_init_images(
    sample_script, tmp_path, capsys
):
    model = _save_tiny_text_model(tmp_path / "t.keras")
    _digit_files(tmp_path / "in", 4)
    argv = [model, "--init-images", str(tmp_path / "in"), "--strength", "0.5"]
    two = ["--prompt", "A", "--prompt", "B"]
    line = _refused(sample_script, [*argv, *two], tmp_path / "o", capsys)
    # The count is the folder's, not a --num-images the user did not type.
    assert "--num-images" not in line, line
    assert "--prompt must hold one prompt for every image or one for each" in line
    assert "4 images of --init-images" in line and "2 prompts" in line, line
    assert "without --init-images, prompts take a row of the grid each" in line
    negative = ["--prompt", "A", "--negative-prompt", "x", "--negative-prompt", "y"]
    line = _refused(sample_script, [*argv, *negative], tmp_path / "o", capsys)
    assert "--negative-prompt must hold one" in line and "--num-images" not in line
    # One an image is taken.
    four = [arg for p in "ABCD" for arg in ("--prompt", p)]
    out = tmp_path / "four"
    assert sample_script.main([*argv, *four, "--steps", "2", "--out", str(out)]) == 0
    assert (out / "grid.png").exists()


def test_more_prompts_than_images_are_refused_and_the_log_says_the_rows(
    sample_script, tmp_path, capsys
):
    run = _text_run_folder(tmp_path / "run")
    model = _save_tiny_text_model(tmp_path / "t.keras")
    three = ["--prompt", "a", "--prompt", "b", "--prompt", "c"]
    for path in (run, model):  # before the run's model loads; after
        argv = [path, *three, "--num-images", "2"]
        line = _refused(sample_script, argv, tmp_path / "o", capsys)
        assert "--prompt holds 3 prompts, more than --num-images 2" in line, line
        assert "pass --num-images 3 or more" in line, line
    logs = {}
    for prompts, count in ((three[:4], 4), (three, 4)):
        argv = [model, *prompts, "--num-images", str(count), "--steps", "2"]
        assert sample_script.main([*argv, "--out", str(tmp_path / "s")]) == 0
        out = capsys.readouterr().out
        logs[len(prompts) // 2] = next(
            line for line in out.splitlines() if line.startswith("Sampling")
        )
    assert logs[2].endswith("prompts a row each (2)"), logs[2]
    # 3 prompts do not divide 4 images into rows: a square grid.
    assert logs[3].endswith("3 prompts in turn, 1 or 2 images each"), logs[3]
