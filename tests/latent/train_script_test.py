"""scripts/train.py --latent sd-vae on a captioned image folder (a text run on
latents), then scripts/sample.py.

The runs and the checks of --latent sd-vae's settings need the keras-cv extra
and skip without it; the flag the autoencoder's weights need without
--latent is refused everywhere."""

import importlib.util
import json
import os

import numpy as np
import pytest
from PIL import Image

# One worker builds the session's keras-cv models (conftest.py) for them all.
pytestmark = pytest.mark.xdist_group("latent")


@pytest.fixture
def image_folder(tmp_path, pixels):
    folder = tmp_path / "images"
    folder.mkdir()
    for index, image in enumerate(pixels):
        pixels_uint8 = np.round((image + 1) * 127.5).astype("uint8")
        Image.fromarray(pixels_uint8).save(folder / f"{index}.png")
    return str(folder)


def test_a_captioned_folder_trains_on_latents_then_sample_decodes(
    image_folder, tmp_path, train_script, sample_script, request
):
    # One latent run of the script for both: the latent path, and the
    # captions that travel with the cached latents and are tokenized as on
    # pixels. keras-cv's autoencoder; the settings' checks below run
    # without it.
    pytest.importorskip("keras_cv")
    reference = request.getfixturevalue("reference")
    with open(os.path.join(image_folder, "metadata.jsonl"), "w") as f:
        for i, caption in enumerate(["red heart", "cat face"] * 2):
            f.write(json.dumps({"file_name": f"{i}.png", "text": caption}) + "\n")
    out = str(tmp_path / "run")
    argv = ["--dataset", "folder", "--data-dir", image_folder, "--image-size", "64"]
    argv += ["--latent", "sd-vae", "--autoencoder-weights", ",".join(reference[2])]
    argv += ["--epochs", "1", "--batch-size", "2", "--widths", "8"]
    argv += ["--num-res-blocks", "1", "--num-samples", "2", "--sampling-steps", "2"]
    argv += ["--jit-compile", "false", "--output-dir", out]
    assert train_script.main(argv) == 0
    with open(os.path.join(out, "prompts.json")) as f:
        assert json.load(f) == ["cat face", "red heart"]
    for name in ("samples.png", "prompts.png", "data.png"):
        with Image.open(os.path.join(out, name)) as grid:
            # Decoded 64x64 RGB images (the grid pads and may upscale).
            assert grid.mode == "RGB" and min(grid.size) >= 64
    # The vocabulary of the captions that travelled with the cached latents
    # (the run's record of its model's).
    with open(os.path.join(out, "vocabulary.json")) as f:
        assert sorted(json.load(f)) == ["cat", "face", "heart", "red"]
    # The saved model decodes (its autoencoder with it) and tokenizes (its
    # vocabulary with it: a model without one refuses prompts), an image a
    # prompt: two images, not the 64 of the flag's default, as the run's
    # decoder is keras-cv's full SD VAE.
    samples = str(tmp_path / "samples")
    argv = [os.path.join(out, "model.keras"), "--steps", "2", "--npz"]
    argv += ["--prompt", "red heart", "--prompt", "cat face", "--num-images", "2"]
    assert sample_script.main(argv + ["--out", samples]) == 0
    with np.load(os.path.join(samples, "samples.npz")) as f:
        images, prompts = f["images"], list(f["prompts"])
    assert prompts == ["red heart", "cat face"]
    assert images.shape == (2, 64, 64, 3) and np.isfinite(images).all()


# --latent sd-vae asks for the keras-cv extra before its settings' checks.
NEEDS_KERAS_CV = pytest.mark.skipif(
    importlib.util.find_spec("keras_cv") is None, reason="needs the keras-cv extra"
)


@pytest.mark.parametrize(
    "extra, match",
    [
        *(
            pytest.param(*case, marks=NEEDS_KERAS_CV)
            for case in [
                (["--latent", "sd-vae", "--image-size", "96"], "multiple of 64"),
                (["--latent", "sd-vae", "--channels", "1"], "--channels 1"),
                (["--latent", "sd-vae", "--widths", "8,8,8,8,8"], "widths"),
                (["--latent", "sd-vae", "--autoencoder-weights", "a.h5"], "a.h5"),
            ]
        ),
        (["--autoencoder-weights", "random"], "--latent sd-vae"),
    ],
)
def test_bad_latent_settings_are_one_line_errors(
    extra, match, image_folder, tmp_path, capsys, train_script
):
    argv = ["--dataset", "folder", "--data-dir", image_folder, "--image-size", "64"]
    argv += ["--output-dir", str(tmp_path / "run"), *extra]
    assert train_script.main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and match in error[0]
    assert not os.path.exists(tmp_path / "run")
