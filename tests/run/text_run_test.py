"""A captioned folder trains a text-to-image model through `train()`: its
vocabulary recorded and kept by a resume, its grids drawn from its prompts,
a resume mid-epoch equal to the uninterrupted run, and `scripts/sample.py
--prompt` on its folder. One tiny run of each kind, shared by the checks."""

import dataclasses
import importlib.util
import json
import sys
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_diffusion import FrozenTextConditioning, TextConditioning
from keras_diffusion.evaluation import folder_judge, folder_quality, posthoc_sweep
from keras_diffusion.run import build, init_from, preemption, text, training
from keras_diffusion.run import config as train_config
from keras_diffusion.run import folder as folder_lib
from keras_diffusion.utils import files, run_files
from tests.interop.init_from_test import SCALE_SHIFT
from tests.run.preemption_test import _SignalAt

CAPTIONS = ["red heart", "green heart", "cat face", "dog face"] * 3


def _captioned_folder(folder, column="text"):
    """12 images of real kinds (RGBA with transparency, a palette PNG, an
    odd size) and their metadata.jsonl, the captions in `column`."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(len(CAPTIONS)):
        pixels = rng.integers(0, 256, (9 + i % 3, 8, 4), np.uint8)
        image = Image.fromarray(pixels, "RGBA")
        if i == 1:
            image = image.convert("RGB").convert("P")
        image.save(folder / f"{i}.png")
    _write_captions(folder, CAPTIONS, column)
    return folder


def _write_captions(folder, captions, column):
    with open(folder / "metadata.jsonl", "w") as f:
        for i, caption in enumerate(captions):
            f.write(json.dumps({"file_name": f"{i}.png", column: caption}) + "\n")


def _pixels(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), np.int32)


def _config(folder, **overrides):
    # A one-level U-Net that attends to the captions in its middle block
    # alone: a text run's files and steps are those of any size, and each of
    # the runs below traces one transformer block, not four (a level's
    # attention would add one down and two up).
    return train_config.TrainConfig(**{
        "dataset": "folder", "data_dir": str(folder), "image_size": 8,
        "batch_size": 4, "epochs": 2, "widths": [8], "num_res_blocks": 1,
        "attention_levels": [False], "num_samples": 4, "sampling_steps": 2,
        "jit_compile": False, "steps_per_execution": 1, "seed": 1, **overrides,
    })  # fmt: skip


def _max_difference(a, b):
    return max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(a.get_weights(), b.get_weights(), strict=True)
    )


def test_a_captioned_folder_trains_a_text_model_that_resumes_and_samples(
    tmp_path, capsys
):
    # Captions in a column of the user's: every reader after the start reads
    # the run's (the judges here; a resume compares it in config.json).
    folder = _captioned_folder(tmp_path / "images", column="caption")
    config = _config(folder, caption_column="caption")
    quiet = {"verbose": 0, "log": lambda m: None}
    whole = training.train(config, tmp_path / "whole", **quiet)
    saved = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert saved["data"]["caption_column"] == "caption"
    assert saved["training"]["caption_dropout"] == 0.1
    assert saved["network"]["text_depth"] == whole.model.conditioning.depth == 0
    assert saved["run"]["guidance_scale"] == 2.0
    vocabulary = whole.model.conditioning.vocabulary
    assert json.loads((tmp_path / "whole" / "vocabulary.json").read_text()) == (
        vocabulary
    )
    with Image.open(tmp_path / "whole" / run_files.PROMPTS_FILE) as grid:
        assert grid.width >= 96  # captioned cells

    # The folder judge samples the captions of half A, as the floor draws
    # half A's images.
    quality = folder_quality.FolderQuality(
        str(folder), 8, num_components=2, caption_column="caption"
    )
    names = sorted(f"{i}.png" for i in range(len(CAPTIONS)))  # the listing's
    listed = [CAPTIONS[int(name.split(".")[0])] for name in names]
    order = np.random.default_rng(0).permutation(len(listed))
    half_a = [listed[i] for i in order[: len(order) // 2]]
    assert quality.prompts == half_a[: quality.num_samples]
    # The run's judges: scripts/evaluate.py --judge-folder's, and the
    # post-hoc EMA sweep's.
    report, _ = folder_judge.judge_saved_model(
        whole.output_dir, str(folder), str(tmp_path / "q.json"), num_components=2
    )
    assert np.isfinite(report["fd_ratio"])
    run = files.run_config(whole.output_dir)
    judge, _ = posthoc_sweep.run_judge(run, str(folder))
    assert np.isfinite(judge(whole.model)["fd_ratio"])

    _a_controlnet_of_the_text_run(folder, whole, tmp_path, quiet)

    with pytest.raises(preemption.Preempted):
        training.train(config, tmp_path / "cut", callbacks=[_SignalAt(4)], **quiet)
    # Captions edited before the resume, their words kept (so is training):
    # the grids keep the prompts the run began with, their rows and words.
    edited = [c.replace("red", "Red") + "!" for c in CAPTIONS]
    _write_captions(folder, edited, "caption")
    resumed = training.train(config, tmp_path / "cut", **quiet)
    assert _max_difference(whole.model, resumed.model) <= 1e-6
    for name in (run_files.SAMPLES_FILE, run_files.PROMPTS_FILE):
        cut, uninterrupted = (_pixels(tmp_path / r / name) for r in ("cut", "whole"))
        assert cut.shape == uninterrupted.shape, name
        assert np.abs(cut - uninterrupted).max() <= 1, name
    # Captions edited since the run began: a resume tokenizes as it began.
    other = TextConditioning()
    other.adapt(["zebra crossing"])
    run = SimpleNamespace(file=lambda name: str(tmp_path / "cut" / name))
    text.restore_vocabulary(run, SimpleNamespace(conditioning=other))
    assert other.vocabulary == vocabulary

    from tests.conftest import load_script

    sample = load_script("sample")
    out = tmp_path / "samples"
    argv = [str(tmp_path / "whole"), "--num-images", "4", "--steps", "2"]
    prompts = ["--prompt", "cat", "--prompt", "red heart", "--negative-prompt", "dog"]
    assert sample.main(argv + ["--out", str(out), "--npz"] + prompts) == 0
    assert list(np.load(out / "samples.npz")["prompts"]) == (
        ["cat"] * 2 + ["red heart"] * 2
    )
    with Image.open(out / "grid.png") as grid:
        assert grid.width >= 2 * 96  # two captioned cells a row
    assert sample.main(argv + ["--out", str(tmp_path / "none")]) == 2
    assert "--prompt" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def _a_controlnet_of_the_text_run(folder, whole, tmp_path, quiet):
    # train.py --init-from TEXT_RUN --control silhouette: the run's encoder,
    # vocabulary and U-Net (their EMA weights), frozen; its grids draw the
    # first batch's controls under their own captions, a row each.
    source = str(whole.output_dir)
    config = _config(
        folder, caption_column="caption", init_from=source, control="silhouette"
    )
    tuned = training.train(
        dataclasses.replace(config, epochs=1), tmp_path / "c", **quiet
    )
    model, base = tuned.model, init_from.load(source).model
    assert model.conditioning.vocabulary == base.conditioning.vocabulary
    assert model.conditioning.dropout == 0.1  # the run's caption dropout
    assert _max_difference(model.denoiser, base.denoiser) == 0.0
    assert _max_difference(model.conditioning, base.conditioning) == 0.0
    prompts = json.loads((tmp_path / "c" / run_files.RUN_PROMPTS_FILE).read_text())
    assert len(prompts) == 4 and set(prompts) <= set(CAPTIONS)  # a batch of 4
    images = model.generate(
        2, prompts=["cat face", "red heart"], control=np.ones((8, 8, 1)), verbose=0
    )
    assert images.shape == (2, 8, 8, 3)
    # Without --control, the run fine-tunes the text model itself.
    _, plain, _ = build.build_data_and_model(
        dataclasses.replace(config, control=None).resolve()
    )
    assert plain.controlnet is None and plain.conditioning.trainable_weights
    assert _max_difference(plain.conditioning, base.conditioning) == 0.0
    # What the checkpoint fixes, refused by flag before a write.
    for overrides, match in (
        ({"caption_column": "none"}, "holds a text model.*caption_column='none'"),
        ({"text_depth": 2}, "--text-depth.*text_depth=0"),
    ):
        with pytest.raises(ValueError, match=match):
            training.train(dataclasses.replace(config, **overrides), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_grid_prompts_under_controls_are_each_a_row_of_its_own_control():
    controls = np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1)
    captions = tf.constant(["a", "b", "c", "d", "e"])
    rows, prompts = text.prompts_under_controls(captions, controls, 6, count=3)
    assert prompts == ["a", "b", "c"]
    assert rows.ravel().tolist() == [0, 0, 1, 1, 2, 2]  # grid_prompts' order


def test_sample_refuses_a_text_run_without_a_prompt_before_loading_it(tmp_path, capsys):
    # The run folder's prompts.json tells a text run: no wait for a large
    # model's load (model.keras here is not one) to learn --prompt is needed.
    run = tmp_path / "run"
    run.mkdir()
    (run / run_files.MODEL_FILE).write_bytes(b"not a model")
    (run / run_files.RUN_PROMPTS_FILE).write_text(json.dumps(["cat face", "dog"]))
    from tests.conftest import load_script

    out = tmp_path / "samples"
    assert load_script("sample").main([str(run), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert "--prompt" in error and "'cat face'" in error
    assert not out.exists()


def test_caption_settings_are_refused_off_a_captioned_folder(tmp_path):
    with pytest.raises(ValueError, match="caption_column.*dataset='digits'"):
        train_config.TrainConfig(caption_column="text").resolve()
    with pytest.raises(ValueError, match="caption_dropout.*captioned"):
        train_config.TrainConfig(caption_dropout=0.2).resolve()
    with pytest.raises(ValueError, match="--text-depth.*captioned"):
        train_config.TrainConfig(text_depth=2).resolve()
    folder = _captioned_folder(tmp_path / "images")
    assert _config(folder).resolve().caption_column == "text"  # the default
    with pytest.raises(ValueError, match="text_depth.*-1"):
        _config(folder, text_depth=-1).resolve()
    architecture = dict.fromkeys(("widths", "num_res_blocks", "attention_levels"))
    config = _config(folder, init_from=SCALE_SHIFT, **architecture)  # no text
    with pytest.raises(ValueError, match="--init-from.*without text.*none"):
        config.resolve()
    assert not (tmp_path / "images" / "cache").exists()
    # A plain model is judged on a captioned folder's images alone.
    quality = folder_quality.FolderQuality(str(folder), 8, num_components=2)
    assert quality.prompts is None


def test_a_text_encoder_is_checked_before_anything_is_written(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="text_encoder.*captioned"):
        train_config.TrainConfig(text_encoder="keras-hub:x").resolve()
    folder = _captioned_folder(tmp_path / "images")
    config = _config(folder)
    config.text_encoder = "clip_vit_base_patch32"  # without its prefix
    with pytest.raises(ValueError, match="keras-hub:PRESET"):
        config.resolve()
    config.text_encoder = "keras-hub:clip_vit_nope"
    if importlib.util.find_spec("keras_hub") is not None:
        with pytest.raises(ValueError, match="clip_vit_base_patch32.*'keras-hub:"):
            config.resolve()
        # Named as a local preset folder, the run's conditioning is a
        # frozen CLIP of it, with no vocabulary of its own to record.
        from tests.conditioning.keras_hub_clip_test import tiny_preset

        config.text_encoder = "keras-hub:" + tiny_preset(tmp_path / "preset")
        resolved = config.resolve()
        conditioning = text.build_conditioning(resolved, CAPTIONS)
        assert isinstance(conditioning, FrozenTextConditioning)
        assert conditioning.encoder.preset == str(tmp_path / "preset")
        assert conditioning.dropout == resolved.caption_dropout == 0.1
        assert resolved.text_depth is None  # the preset's layers
        config.text_depth = 1
        with pytest.raises(ValueError, match="--text-depth.*keras-hub"):
            config.resolve()
        config.text_depth = None
        run = SimpleNamespace(file=lambda name: str(tmp_path / "run" / name))
        text.write_vocabulary(run, SimpleNamespace(conditioning=conditioning))
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # not installed
    with pytest.raises(ValueError, match=r'pip install "\.\[keras-hub\]"'):
        config.resolve()
    assert not (tmp_path / "run").exists()


# A whole run: its tracing of a U-Net's step is most of a minute on a
# 2-core CPU. The checks of the flag and the conditioning it builds are
# the test above's, in the default run.
@pytest.mark.slow
def test_a_run_takes_a_frozen_keras_hub_encoder_saved_by_its_preset(tmp_path):
    pytest.importorskip("keras_hub")
    from tests.conditioning.keras_hub_clip_test import tiny_preset

    folder = _captioned_folder(tmp_path / "images")
    config = _config(folder)
    config.epochs, config.num_samples = 1, 2
    config.text_encoder = "keras-hub:" + tiny_preset(tmp_path / "preset")
    run = training.train(config, tmp_path / "run", verbose=0, log=lambda m: None)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["network"]["text_encoder"] == config.text_encoder
    assert not (tmp_path / "run" / "vocabulary.json").exists()
    model = run.model
    assert not model.conditioning.trainable_variables
    loaded = keras.saving.load_model(str(tmp_path / "run" / "model.keras"))
    # Guided by the frozen encoder's empty prompt at the run's guidance, as
    # the final grid of two images was: the trained model's loop is the
    # grid's, not traced again.
    kwargs = {"prompts": "red heart", "seed": 0, "verbose": 0}
    kwargs["guidance_scale"] = saved["run"]["guidance_scale"]
    np.testing.assert_allclose(
        loaded.generate(2, **kwargs), model.generate(2, **kwargs), atol=1e-6
    )


def test_a_text_run_of_an_earlier_release_resumes_as_it_began(tmp_path):
    folder = _captioned_folder(tmp_path / "images")
    earlier = _config(folder, image_size=12).resolve().sections()
    del earlier["network"]["text_depth"]  # what the release before it recorded
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / run_files.CONFIG_FILE).write_text(json.dumps(earlier))
    # The same command takes the two layers and the image size the run
    # began with (a release before text.CPU_DEFAULTS: the folder's) ...
    same = _config(folder, image_size=None)
    resolved = text.resumed_text_run(same, str(run_dir)).resolve()
    assert resolved.text_depth == text.EARLIER_TEXT_DEPTH == 2
    assert resolved.image_size == 12
    assert text.build_conditioning(resolved, CAPTIONS).depth == 2
    _, resume = folder_lib.prepare_run_folder(
        run_dir, resolved.sections(), upgrade=train_config.upgrade
    )
    assert resume
    # ... and a new run (or one started again) the measured defaults.
    for config in (
        text.resumed_text_run(same, str(run_dir), True),
        text.resumed_text_run(same, str(tmp_path)),
    ):
        assert config.text_depth is None and config.image_size is None
    if not train_config.gpu_present():
        assert same.resolve().image_size == text.CPU_DEFAULTS["image_size"]
    with pytest.raises(ValueError, match="other settings.*text_depth"):
        folder_lib.prepare_run_folder(
            run_dir,
            _config(folder, image_size=12).resolve().sections(),
            upgrade=train_config.upgrade,
        )
