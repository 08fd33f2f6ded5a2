"""`scripts/train.py --init-from keras-hub:PRESET` fine-tunes keras-hub's SD3
on a captioned folder: a tiny random SD3 saved as a local preset folder (no
download), one run through the command line (its model.keras loads and
generates, its grids drawn from its prompts), the same run stopped by
SIGTERM and resumed to the same weights, and the flags it refuses."""

import io
import json
import zipfile

import h5py
import keras
import numpy as np
import pytest
from PIL import Image

keras_hub = pytest.importorskip("keras_hub")

from keras_diffusion.run import config as train_config  # noqa: E402
from keras_diffusion.run import preemption, training  # noqa: E402
from keras_diffusion.utils import run_files  # noqa: E402
from tests.conftest import load_script  # noqa: E402
from tests.interop.keras_hub_sd3_test import IMAGE, _tiny_task  # noqa: E402
from tests.run.preemption_test import _SignalAt  # noqa: E402

CAPTIONS = ["airplane", "airport", "airport", "airplane"]


def _captioned_folder(folder):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(len(CAPTIONS)):
        pixels = rng.integers(0, 256, (IMAGE + 4 * i, IMAGE, 3), np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    with open(folder / "metadata.jsonl", "w") as f:
        for i, caption in enumerate(CAPTIONS):
            f.write(json.dumps({"file_name": f"{i}.png", "text": caption}) + "\n")
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny SD3 preset folder, a captioned folder and a run of the command
    line on them: `(root, argv, flags)`, the flags of the run's settings."""
    root = tmp_path_factory.mktemp("sd3")
    keras.utils.set_random_seed(0)
    _tiny_task().save_to_preset(str(root / "preset"))
    folder = _captioned_folder(root / "images")
    flags = [
        "--init-from", f"keras-hub:{root / 'preset'}", "--data-dir", str(folder),
        "--lora-rank", "2", "--epochs", "2", "--batch-size", "2",
        "--num-samples", "2", "--sampling-steps", "2", "--jit-compile", "false",
        "--steps-per-execution", "1", "--cache-dir", "none",
    ]  # fmt: skip
    argv = flags + ["--output-dir", str(root / "whole")]
    assert load_script("train").main(argv) == 0
    return root, flags


def _config(flags):
    """The `TrainConfig` of the command line's flags."""
    names = (flag[2:].replace("-", "_") for flag in flags[0::2])
    settings = dict(zip(names, flags[1::2], strict=True))
    del settings["cache_dir"]
    ints = ("lora_rank", "epochs", "batch_size", "num_samples", "sampling_steps")
    ints += ("steps_per_execution",)
    settings.update({name: int(settings[name]) for name in ints})
    settings["jit_compile"] = False
    return train_config.TrainConfig(**settings)


def _weights(path):
    """The arrays of a `.keras` file's weights (its optimizer's with them),
    by name, read from the archive: no SD3 is rebuilt to compare two files."""
    arrays = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = item[()]

    with zipfile.ZipFile(path) as archive:
        data = io.BytesIO(archive.read("model.weights.h5"))
    with h5py.File(data, "r") as weights:
        weights.visititems(keep)
    return arrays


def test_a_cli_run_fine_tunes_the_preset_and_its_model_keras_generates(setup):
    root, _ = setup
    run = root / "whole"
    saved = json.loads((run / "config.json").read_text())
    assert saved["process"]["name"] == "flow" and saved["process"]["shift"] == 3.0
    assert saved["data"]["image_size"] == IMAGE
    assert saved["run"]["sampler"] == "euler" and saved["run"]["guidance_scale"] == 7.0
    assert json.loads((run / run_files.RUN_PROMPTS_FILE).read_text()) == [
        "airplane",
        "airport",
    ]
    for name in (run_files.SAMPLES_FILE, run_files.PROMPTS_FILE):
        assert (run / name).exists(), name
    model = keras.saving.load_model(str(run / run_files.MODEL_FILE))
    assert model.lora["rank"] == 2
    assert model.trainable_variables and all(
        "lora" in v.path for v in model.trainable_variables
    )
    images = model.generate(2, prompts=["airplane", "airport"], seed=0, verbose=0)
    assert images.shape == (2, IMAGE, IMAGE, 3) and np.isfinite(images).all()
    # scripts/sample.py samples the run folder from prompts.
    out = root / "samples"
    argv = [str(run), "--prompt", "airplane", "--num-images", "2", "--steps", "2"]
    assert load_script("sample").main(argv + ["--out", str(out)]) == 0
    assert (out / "grid.png").exists()


@pytest.mark.heavy
def test_a_sigterm_run_resumes_to_the_uninterrupted_weights(setup, capsys):
    root, flags = setup
    config = _config(flags)
    quiet = {"verbose": 0, "log": lambda m: None, "cache_dir": "none"}
    cut = root / "cut"
    with pytest.raises(preemption.Preempted):
        training.train(config, cut, callbacks=[_SignalAt(2)], **quiet)
    assert not (cut / run_files.MODEL_FILE).exists()
    # The same command, on the interrupted folder.
    argv = flags + ["--output-dir", str(cut)]
    capsys.readouterr()
    assert load_script("train").main(argv) == 0
    # The signal came as step 3 of 4 began: the backup of its end is
    # restored, and the run goes on in the middle of epoch 2.
    assert "in epoch 2/2 after step 1" in capsys.readouterr().out
    whole = _weights(root / "whole" / run_files.MODEL_FILE)
    resumed = _weights(cut / run_files.MODEL_FILE)
    assert whole.keys() == resumed.keys()
    differences = [np.abs(whole[name] - resumed[name]).max() for name in whole]
    assert max(differences) <= 1e-6


def test_image_size_builds_the_preset_at_that_size(setup):
    _, flags = setup
    config = _config(flags)
    config.image_size = 16
    resolved = config.resolve()
    assert tuple(resolved.checkpoint.model.backbone.image_shape) == (16, 16, 3)
    assert (resolved.image_size, resolved.process, resolved.shift) == (16, "flow", 3.0)
    # Not given: a fine-tune's learning rate, not a folder run's.
    assert resolved.learning_rate == 1e-4 and resolved.caption_dropout == 0.1


def test_mixed_precision_loads_the_preset_under_its_policy(tmp_path):
    """`--mixed-precision bfloat16`: the preset, loaded when the config
    resolves (before the run sets the policy), has its MMDiT compute in
    bfloat16 on float32 weights; the global policy is left as it was."""
    _tiny_task().save_to_preset(str(tmp_path / "preset"))
    folder = _captioned_folder(tmp_path / "images")
    config = train_config.TrainConfig(
        init_from=f"keras-hub:{tmp_path / 'preset'}",
        data_dir=str(folder),
        mixed_precision="bfloat16",
    )
    mmdit = config.resolve().checkpoint.model.backbone.diffuser
    assert mmdit.compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in mmdit.weights)
    assert keras.mixed_precision.global_policy().name == "float32"


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--widths", "8,16"], "--widths [8, 16]"),
        (["--latent", "sd-vae"], "--latent 'sd-vae'"),
        (["--text-encoder", "keras-hub:clip"], "--text-encoder 'keras-hub:clip'"),
        (["--process", "edm"], "--process edm"),
        (["--schedule", "cosine"], "--schedule cosine"),
        (["--beta-schedule", "linear"], "--beta-schedule linear"),
        (["--strategy", "mirrored"], "--strategy 'mirrored'"),
        (["--caption-column", "none"], "--data-dir"),
        (["--image-size", "20"], "--image-size 20"),
        (["--channels", "1"], "--channels 1"),
    ],
)
def test_flags_that_do_not_apply_are_refused_before_anything_is_written(
    setup, tmp_path, capsys, extra, named
):
    _, flags = setup
    out = tmp_path / "run"
    argv = flags + extra + ["--output-dir", str(out)]
    assert load_script("train").main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and named in error[0], error
    assert not out.exists()


def test_an_unknown_preset_and_uncaptioned_images_are_refused(tmp_path, capsys):
    train = load_script("train")
    folder = _captioned_folder(tmp_path / "images")
    out = tmp_path / "run"
    argv = ["--init-from", "keras-hub:nope", "--data-dir", str(folder)]
    assert train.main(argv + ["--output-dir", str(out)]) == 2
    error = capsys.readouterr().err
    assert "--init-from" in error and "stable_diffusion_3_medium" in error
    (folder / "metadata.jsonl").unlink()
    assert train.main(argv + ["--output-dir", str(out)]) == 2
    error = capsys.readouterr().err
    assert "--data-dir" in error and "captioned" in error
    assert not out.exists()
