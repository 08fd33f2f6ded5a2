"""The folder defaults of `TrainConfig`, as docs/quality.md states them."""

import os
import re

import pytest

from keras_diffusion.models import unet_sizes
from keras_diffusion.run import config as train_config

DOC = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "docs",
    "quality.md",
)
SECTION = "### The folder defaults"


def _documented_defaults():
    """`{setting: (cpu, gpu)}` from the table under `SECTION` in the doc."""
    with open(DOC) as f:
        text = f.read()
    assert SECTION in text, f"{DOC} lacks the section {SECTION!r}"
    table = text.split(SECTION, 1)[1]
    rows = re.findall(r"^\| `--([a-z-]+)` \| `([^`]+)` \| `([^`]+)` \|", table, re.M)
    assert rows, "no `--flag` | `cpu` | `gpu` rows under the section"
    return {flag.replace("-", "_"): (cpu, gpu) for flag, cpu, gpu in rows}


@pytest.mark.parametrize("machine", ["cpu", "gpu"])
def test_folder_defaults_are_the_documented_ones(machine, tmp_path, monkeypatch):
    monkeypatch.setattr(unet_sizes, "gpu_present", lambda: machine == "gpu")
    monkeypatch.setattr(train_config, "gpu_present", lambda: machine == "gpu")
    config = train_config.TrainConfig(dataset="folder", data_dir=str(tmp_path))
    resolved = config.resolve().to_dict()
    documented = _documented_defaults()
    assert {"epochs", "learning_rate", "prediction_type", "sampler"} <= set(documented)
    column = 0 if machine == "cpu" else 1
    for name, values in documented.items():
        assert str(resolved[name]) == values[column], (name, machine)


def test_settings_are_taken_and_read_flat_and_recorded_by_section():
    config = train_config.TrainConfig(dataset="digits", epochs=1, sigma_min=0.01)
    assert (config.epochs, config.sigma_min, config.p_mean) == (1, 0.01, None)
    config.sigma_max = 40.0  # a process's setting, set flat, in its section
    assert config.process_settings["sigma_max"] == 40.0
    assert config.to_dict()["sigma_max"] == 40.0
    sections = train_config.TrainConfig(process="edm", sigma_min=0.01).sections()
    assert list(sections) == ["data", "network", "process", "training", "run"]
    assert sections["process"]["name"] == "edm"
    assert sections["process"]["sigma_min"] == 0.01
    assert "beta_schedule" not in sections["process"]
    assert sections["training"]["epochs"] is None
    with pytest.raises(TypeError, match=r"sigma_mni.*Received: sigma_mni=0.01"):
        train_config.TrainConfig(sigma_mni=0.01)
