"""`.keras` files saved by an earlier release load and generate the same images.

The files in tests/fixtures/legacy were written by
tests/fixtures/legacy/make_legacy_models.py with the release whose version
their `.npz` records; they are never rewritten.
"""

import importlib.util
import io
import os
import subprocess
import zipfile

import h5py
import keras
import numpy as np
import pytest

import keras_diffusion

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy")


@pytest.mark.parametrize("name", ["vp_conditional", "edm", "lora"])
def test_legacy_file_loads_and_generates_the_same_images(name):
    model = keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"))
    expected = np.load(os.path.join(FIXTURES, f"{name}.npz"))
    assert isinstance(model, keras_diffusion.DiffusionModel)
    kwargs = (
        {"labels": [0, 1, 2, 0], "guidance_scale": 2.0} if model.num_classes else {}
    )
    out = model.generate(
        4,
        sampler=keras_diffusion.samplers.get("dpm", num_steps=4),
        seed=3,
        verbose=0,
        **kwargs,
    )
    np.testing.assert_allclose(out, expected["dpm4"], atol=1e-5)
    default = model.generate(
        2, seed=4, verbose=0, **({"labels": [1, 2]} if model.num_classes else {})
    )
    np.testing.assert_allclose(default, expected["default"], atol=1e-5)


def test_legacy_schedules_are_what_they_were():
    vp = keras.saving.load_model(os.path.join(FIXTURES, "vp_conditional.keras"))
    edm = keras.saving.load_model(os.path.join(FIXTURES, "edm.keras"))
    assert isinstance(vp.schedule, keras_diffusion.NoiseSchedule)
    assert vp.prediction_type == "v_prediction" and vp.num_classes == 3
    assert isinstance(edm.schedule, keras_diffusion.EDMSchedule)
    assert edm.schedule.sigma_data == pytest.approx(0.6)


def test_legacy_lora_file_adapts_the_layers_its_patterns_chose():
    # Saved when the blocks' sublayers had Keras' numbered names: its
    # patterns ("*/conv2d*", "*multi_head_attention*") name those.
    path = os.path.join(FIXTURES, "lora.keras")
    with zipfile.ZipFile(path) as archive:
        weights = h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r")
        saved = []
        weights.visit(saved.append)
    adapters = [k for k in saved if k.endswith("/lora_kernel_a")]
    model = keras.saving.load_model(path)
    assert "*/conv2d*" in model.lora["layers"]
    adapted = [
        layer
        for layer in keras_diffusion.adapters.lora.adaptable_layers(
            model.denoiser
        ).values()
        if layer.lora_enabled
    ]
    assert len(adapted) == len(adapters) > 0


# Saved by main at 493a491 before the refactors of issue 52 (the VP objective
# onto NoiseSchedule, the averages out of models/): each `.npz` holds what
# that code got from the file as loaded back (make_legacy_models.py's
# `probe`), which today's must still get.
PROBED = ["vp_min_snr", "flow", "consistency", "posthoc_ema"]


def _profile_sums(folder):
    """The float64 sum of each tracked weight in each profile of the newest
    snapshot `PosthocSnapshots` wrote in `folder`."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".npz"))
    with np.load(os.path.join(folder, names[-1])) as snapshot:
        keys = [k for k in snapshot.files if k.startswith("p")]
        count = 1 + max(int(k[1:].split("_")[0]) for k in keys)
        return np.asarray(
            [
                [
                    np.sum(snapshot[f"p{k}_{j}"], dtype=np.float64)
                    for j in range(len(keys) // count)
                ]
                for k in range(count)
            ]
        )


@pytest.mark.parametrize("name", PROBED)
def test_a_file_of_main_before_issue_52_loads_generates_and_trains_on(name, tmp_path):
    model = keras.saving.load_model(os.path.join(FIXTURES, f"{name}.keras"))
    expected = np.load(os.path.join(FIXTURES, f"{name}.npz"))
    kwargs = {}
    if model.num_classes:
        assert model.guidance_scale == 2.0
        kwargs = {"labels": [1, 2], "guidance_scale": model.guidance_scale}
    # Its own sampler (saved with it), and the same images.
    images = model.generate(2, seed=8, verbose=0, **kwargs)
    np.testing.assert_allclose(images, expected["own"], atol=1e-5)
    # Training goes on, with the optimizer's and the averages' state the
    # file holds; the loss of the step pins the objective (prediction type,
    # loss weighting, Min-SNR gamma, the process's settings) wherever it
    # lives.
    data = expected["batch_images"]
    if model.num_classes:
        data = (data, expected["batch_labels"])
    callbacks = []
    if expected["profile_sums"].size:
        callbacks = [keras_diffusion.callbacks.PosthocSnapshots(tmp_path, every=1)]
    history = model.fit(
        data, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=callbacks
    )
    loss = history.history["loss"][-1]
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected["fit_loss"], rtol=1e-5)
    if expected["profile_sums"].size:
        np.testing.assert_allclose(
            _profile_sums(tmp_path), expected["profile_sums"], rtol=1e-5, atol=1e-6
        )


def test_fixture_scripts_record_the_library_commit(tmp_path):
    # make_legacy_models.py and make_legacy_run.py record this in their files.
    spec = importlib.util.spec_from_file_location(
        "library_commit", os.path.join(FIXTURES, "library_commit.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    log = subprocess.run(
        ["git", "-C", root, "log", "-1", "--format=%h", "--", "keras_diffusion"]
        + ["scripts"],
        capture_output=True,
        text=True,
    )
    assert module.library_commit(os.path.abspath(root)) == log.stdout.strip()
    assert module.library_commit(str(tmp_path)) == ""
