"""`.keras` files saved by an earlier release load and generate the same images.

The files in tests/fixtures/legacy were written by
tests/fixtures/legacy/make_legacy_models.py with the release whose version
their `.npz` records; they are never rewritten.
"""

import io
import os
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
