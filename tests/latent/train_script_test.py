"""scripts/train.py --latent sd-vae on an image folder, then scripts/sample.py;
a captioned folder's text run on latents.

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


def test_train_on_latents_then_sample_decodes(
    image_folder, tmp_path, train_script, sample_script, request
):
    # keras-cv's autoencoder; the settings' checks below run without it.
    pytest.importorskip("keras_cv")
    reference = request.getfixturevalue("reference")
    out = str(tmp_path / "run")
    argv = ["--dataset", "folder", "--data-dir", image_folder, "--image-size", "64"]
    argv += ["--latent", "sd-vae", "--autoencoder-weights", ",".join(reference[2])]
    argv += ["--epochs", "1", "--batch-size", "2", "--widths", "8"]
    argv += ["--num-res-blocks", "1", "--num-samples", "2", "--sampling-steps", "2"]
    argv += ["--jit-compile", "false", "--output-dir", out]
    assert train_script.main(argv) == 0
    for name in ("samples.png", "data.png"):
        with Image.open(os.path.join(out, name)) as grid:
            # Decoded 64x64 RGB images (the grid pads and may upscale).
            assert grid.mode == "RGB" and min(grid.size) >= 64
    samples = str(tmp_path / "samples")
    argv = [os.path.join(out, "model.keras"), "--num-images", "2", "--steps", "2"]
    assert sample_script.main([*argv, "--npz", "--out", samples]) == 0
    with np.load(os.path.join(samples, "samples.npz")) as f:
        assert f["images"].shape == (2, 64, 64, 3)


def test_a_captioned_folder_trains_a_text_model_on_latents(
    image_folder, tmp_path, request
):
    pytest.importorskip("keras_cv")
    from keras_diffusion.run import config as train_config
    from keras_diffusion.run import training

    reference = request.getfixturevalue("reference")
    with open(os.path.join(image_folder, "metadata.jsonl"), "w") as f:
        for i, caption in enumerate(["red heart", "cat face"] * 2):
            f.write(json.dumps({"file_name": f"{i}.png", "text": caption}) + "\n")
    config = train_config.TrainConfig(
        dataset="folder", data_dir=image_folder, image_size=64, latent="sd-vae",
        autoencoder_weights=",".join(reference[2]), epochs=1, batch_size=2,
        widths=[8], num_res_blocks=1, num_samples=2, sampling_steps=2,
        jit_compile=False,
    )  # fmt: skip
    out = tmp_path / "run"
    result = training.train(config, out, verbose=0, log=lambda message: None)
    # The captions travel with the cached latents and are tokenized as on
    # pixels: a text model whose grids are its prompts.
    model = result.model
    assert model.autoencoder is not None
    assert sorted(model.conditioning.vocabulary) == ["cat", "face", "heart", "red"]
    assert json.loads((out / "prompts.json").read_text()) == ["cat face", "red heart"]
    for name in ("prompts.png", "data.png"):
        with Image.open(out / name) as grid:
            assert grid.mode == "RGB" and min(grid.size) >= 64
    images = model.generate(
        2, prompts=["red heart", "cat face"], guidance_scale=2.0, seed=0, verbose=0
    )
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
