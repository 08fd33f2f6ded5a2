"""Safe loading: a saved model holds no code, and a tampered archive is refused.

`keras.saving.load_model(path)` runs with `safe_mode=True` by default; the
archive of a `DiffusionModel(UNet)` must load that way, with no Lambda layer,
marshalled lambda or pickled object in it, and an archive into which someone
has injected a Lambda layer carrying code must be refused without running it.
"""

import json
import zipfile

import keras
import numpy as np
import pytest

from keras_diffusion import DDIMSampler, DiffusionModel, NoiseSchedule, UNet
from tests.denoisers import tiny_unet

# Keras' markers of serialized code: Lambda layers, marshalled lambdas and
# functions, and raw bytes.
CODE_CLASS_NAMES = {"Lambda", "__lambda__", "function", "__bytes__"}
ARCHIVE_FILES = {"config.json", "metadata.json", "model.weights.h5"}


def _walk(node):
    yield node
    if isinstance(node, dict):
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    keras.utils.set_random_seed(0)
    unet = tiny_unet(num_classes=2)
    model = DiffusionModel(
        unet, NoiseSchedule(20, "cosine"), prediction_type="v_prediction"
    )
    model.compile(optimizer="adam")
    model.optimizer.build(model.trainable_variables)
    path = str(tmp_path_factory.mktemp("model") / "model.keras")
    model.save(path)
    return model, path


def _read_config(path):
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("config.json"))


def _write_with_config(source, target, config):
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                data = json.dumps(config).encode()
            new.writestr(item, data)


def test_archive_holds_no_code(saved_model):
    _, path = saved_model
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert names == ARCHIVE_FILES
    config = _read_config(path)
    assert config["class_name"] == "DiffusionModel"
    nodes = [node for node in _walk(config) if isinstance(node, dict)]
    class_names = {node["class_name"] for node in nodes if "class_name" in node}
    assert "UNet" in class_names and "NoiseSchedule" in class_names
    assert not class_names & CODE_CLASS_NAMES, class_names & CODE_CLASS_NAMES
    modules = {node["module"] for node in nodes if isinstance(node.get("module"), str)}
    assert all(m.split(".")[0] in ("keras", "keras_diffusion") for m in modules), (
        modules
    )
    registered = {
        node["registered_name"]
        for node in nodes
        if isinstance(node.get("registered_name"), str)
        and node.get("module", "").startswith("keras_diffusion")
    }
    assert registered and all(n.startswith("keras_diffusion>") for n in registered)


def test_loads_under_safe_mode(saved_model):
    model, path = saved_model
    loaded = keras.saving.load_model(path)  # safe_mode=True, no custom_objects
    assert isinstance(loaded, DiffusionModel)
    assert isinstance(loaded.denoiser, UNet)
    sampler = DDIMSampler(num_steps=3)
    np.testing.assert_allclose(
        loaded.generate(2, sampler=sampler, labels=1, seed=3),
        model.generate(2, sampler=sampler, labels=1, seed=3),
        atol=1e-6,
    )


def _lambda_denoiser(marker):
    """A denoiser whose Lambda layer writes `marker` when it runs."""
    # Self-contained, so that it survives marshalling: `open` is a builtin.
    payload = lambda x, p=str(marker): (open(p, "w").write("code ran"), x)[1]  # noqa: E731

    x_in = keras.Input((8, 8, 1), name="x_t")
    t_in = keras.Input((), name="t")
    y_in = keras.Input((), dtype="int32", name="labels")
    out = keras.layers.Lambda(payload, name="payload")(x_in)
    return keras.Model([x_in, t_in, y_in], out)


def _tamper_denoiser(config, marker):
    config["config"]["denoiser"] = keras.saving.serialize_keras_object(
        _lambda_denoiser(marker)
    )


def _tamper_schedule(config, marker):
    # A bare marshalled lambda where an object is expected.
    layer = keras.saving.serialize_keras_object(
        keras.layers.Lambda(lambda x, p=str(marker): open(p, "w").close() or x)
    )
    config["config"]["schedule"] = layer["config"]["function"]


@pytest.mark.parametrize("tamper", [_tamper_denoiser, _tamper_schedule])
def test_tampered_archive_is_refused_without_running_its_code(
    saved_model, tmp_path, tamper
):
    _, path = saved_model
    marker = tmp_path / "code_ran.txt"
    config = _read_config(path)
    tamper(config, marker)
    marker.unlink(missing_ok=True)  # Building the payload ran it once.
    text = json.dumps(config)
    assert "__lambda__" in text
    tampered = str(tmp_path / "tampered.keras")
    _write_with_config(path, tampered, config)

    with pytest.raises(ValueError, match="(?i)unsafe|safe_mode"):
        keras.saving.load_model(tampered)
    assert not marker.exists()


def test_the_injected_payload_is_live_code(saved_model, tmp_path):
    """The control: with safe mode off the injected layer runs its code, so the
    refusal above is what keeps it from running."""
    _, path = saved_model
    marker = tmp_path / "code_ran.txt"
    config = _read_config(path)
    _tamper_denoiser(config, marker)
    marker.unlink()
    keras.saving.deserialize_keras_object(config["config"]["denoiser"], safe_mode=False)
    assert marker.read_text() == "code ran"
