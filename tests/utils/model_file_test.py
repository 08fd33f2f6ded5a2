"""What users pass where a model is expected: a `.keras` file, a run folder,
a path with a typo, a model of a class this process does not know."""

import importlib.util
import os
import subprocess
import sys
import warnings

import keras
import pytest

import keras_diffusion
from keras_diffusion.interop.load import load
from keras_diffusion.utils import files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def saved(tmp_path, make_unet):
    run = tmp_path / "runs" / "digits"
    run.mkdir(parents=True)
    model = keras_diffusion.DiffusionModel(make_unet(), seed=0)
    files.save_model(model, str(run / "model.keras"))
    (run / "config.json").write_text("{}")
    return run


def test_a_run_folder_means_its_model(saved):
    for source in (saved, str(saved), str(saved / "model.keras")):
        model = load(source)
        assert isinstance(model, keras_diffusion.DiffusionModel)


def test_a_run_that_has_not_finished_says_so(tmp_path):
    run = tmp_path / "cut"
    (run / "backup").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="run has not finished") as info:
        load(str(run))
    assert str(run) in str(info.value)


@pytest.mark.parametrize("typo", ["runs/digit", "runs/digits/model.kera", "m.keras"])
def test_a_path_that_does_not_exist_is_not_a_hub_id(saved, typo, monkeypatch):
    # runs/ exists here, so runs/digit is a typo, not the Hub id "runs/digit".
    monkeypatch.chdir(saved.parent.parent)
    with pytest.raises(ValueError, match="No such file or folder") as info:
        load(typo)
    assert repr(typo) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.heavy
def test_an_unknown_class_is_one_line_naming_it_and_the_fix(
    tmp_path, monkeypatch, sample_script, capsys
):
    # Saved here, where the class is registered; loaded by scripts/sample.py
    # in a process that never imported it, then here once the registration
    # is undone: Keras finds a class of a package other than its own only in
    # its registry.
    module = tmp_path / "my_denoisers.py"
    module.write_text(
        "import keras\n\n"
        "@keras.saving.register_keras_serializable(package='mine')\n"
        "class TinyDenoiser(keras.Model):\n"
        "    def __init__(self, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.conv = keras.layers.Conv2D(1, 3, padding='same')\n"
        "    def call(self, x_t, t):\n"
        "        return self.conv(x_t)\n"
    )
    spec = importlib.util.spec_from_file_location("my_denoisers", module)
    my_denoisers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(my_denoisers)
    path = tmp_path / "m.keras"
    keras_diffusion.DiffusionModel(
        my_denoisers.TinyDenoiser(), image_shape=(8, 8, 1)
    ).save(str(path))

    # scripts/sample.py without --import: exit 2 and one line naming the fix.
    sample = [sys.executable, os.path.join(ROOT, "scripts", "sample.py"), str(path)]
    args = ["--num-images", "2", "--steps", "2", "--out", "out"]
    cut = subprocess.run(
        sample + args, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert cut.returncode == 2 and "Traceback" not in cut.stderr
    assert "--import my_denoisers" in cut.stderr
    # That line alone: no TensorFlow start-up line around it.
    assert len(cut.stderr.splitlines()) == 1, cut.stderr

    monkeypatch.delitem(keras.saving.get_custom_objects(), "mine>TinyDenoiser")
    monkeypatch.delitem(sys.modules, "my_denoisers", raising=False)
    with pytest.raises(ValueError) as info:
        files.load_model(str(path))
    message = str(info.value)
    assert "'mine>TinyDenoiser'" in message and "--import my_denoisers" in message
    assert "\n" not in message and len(message) < 400

    # With --import it samples: my_denoisers, imported from the current
    # folder, registers the class (main() here, as the process would run it).
    monkeypatch.setattr(sys, "path", list(sys.path))  # --import extends it
    monkeypatch.chdir(tmp_path)
    assert sample_script.main([str(path), *args, "--import", "my_denoisers"]) == 0
    assert (tmp_path / "out" / "grid.png").exists()

    # From another folder the module name is not found: the one line says
    # where it looked and that its file works; the file then does.
    monkeypatch.delitem(keras.saving.get_custom_objects(), "mine>TinyDenoiser")
    monkeypatch.delitem(sys.modules, "my_denoisers", raising=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # Where the --import above found it: not on the path from elsewhere.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    capsys.readouterr()
    assert sample_script.main([str(path), *args, "--import", "my_denoisers"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "no module 'my_denoisers' in the current folder" in line
    assert "--import path/to/my_denoisers.py" in line and "PYTHONPATH" in line
    assert sample_script.main([str(path), *args, "--import", str(module)]) == 0


def test_saving_an_unregistered_denoiser_warns_that_it_will_not_load(tmp_path):
    class Unregistered(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv = keras.layers.Conv2D(1, 3, padding="same")

        def call(self, x_t, t):
            return self.conv(x_t)

    model = keras_diffusion.DiffusionModel(Unregistered(), image_shape=(8, 8, 1))
    with pytest.warns(UserWarning, match="Unregistered .* not registered"):
        model.save(str(tmp_path / "m.keras"))


def test_saving_registered_and_keras_denoisers_is_silent(tmp_path, make_unet):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        x, t = keras.Input((8, 8, 1)), keras.Input(())
        functional = keras.Model([x, t], keras.layers.Conv2D(1, 3, padding="same")(x))
        for name, denoiser in (("unet", make_unet()), ("functional", functional)):
            path = str(tmp_path / f"{name}.keras")
            keras_diffusion.DiffusionModel(denoiser).save(path)
            assert os.path.getsize(path) > 0


def test_a_diffusers_unet_folder_is_not_taken_for_a_run_folder():
    # Its config.json is the UNet's, not a run's: it loads through diffusers.
    unet = os.path.join(
        ROOT, "tests", "interop", "fixtures", "pipeline_scale_shift", "unet"
    )
    assert isinstance(load(unet), keras_diffusion.DiffusionModel)
