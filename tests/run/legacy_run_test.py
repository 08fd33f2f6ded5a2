"""A run folder that an earlier release's `scripts/train.py` left interrupted
resumes with the same command, to the model of the uninterrupted run.

tests/fixtures/legacy/run_493a491 was written by
tests/fixtures/legacy/make_legacy_run.py at main's 493a491, before the
refactors of issue 52 (the run's config by concept, the VP objective on
`NoiseSchedule`): `run/` is the folder of a v-prediction, Min-SNR weighted
VP run on the digits stopped by SIGTERM in its second epoch (config.json,
log.csv, backup/), `command.json` its flags, `expected.npz` what the
uninterrupted run's model generates. It is never rewritten.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_diffusion.run import config as train_config
from keras_diffusion.run import training
from keras_diffusion.utils import settings

FIXTURE = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "legacy", "run_493a491"
)


def _command():
    with open(os.path.join(FIXTURE, "command.json")) as f:
        return json.load(f)


class _CountBatches(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1


class _Captured(Exception):
    """The `TrainConfig` a command hands to `train`, which never starts."""


def _capture(config, output_dir, **kwargs):
    raise _Captured(config)


def test_an_interrupted_run_of_an_earlier_release_resumes_to_the_same_model(
    tmp_path, train_script, monkeypatch
):
    command = _command()
    run = tmp_path / "run"
    shutil.copytree(os.path.join(FIXTURE, "run"), run)
    counted = _CountBatches()
    real = training.train

    def train(config, output_dir, **kwargs):
        kwargs["callbacks"] = [*kwargs.get("callbacks", ()), counted]
        return real(config, output_dir, **kwargs)

    monkeypatch.setattr(training, "train", train)
    assert train_script.main([*command["argv"], "--output-dir", str(run)]) == 0
    # Resumed from the backup, in the middle of its epoch, not started again.
    assert counted.count == command["batches_total"] - command["batches_done"]
    model = keras.saving.load_model(run / "model.keras")
    images = model.generate(
        2, labels=[1, 2], guidance_scale=model.guidance_scale, seed=8, verbose=0
    )
    expected = np.load(os.path.join(FIXTURE, "expected.npz"))["images"]
    np.testing.assert_allclose(images, expected, atol=1e-5)


def test_a_config_json_of_an_earlier_release_is_the_run_its_command_makes(
    tmp_path, train_script, monkeypatch
):
    with open(os.path.join(FIXTURE, "run", "config.json")) as f:
        # By section, as this release records it (the file is flat).
        saved = train_config.upgrade(json.load(f))
    # The saved run resolves to itself...
    again = train_config.TrainConfig(**settings.flat(saved)).resolve()
    assert again.sections() == saved
    # ... and is what its command resolves to today, as a resume compares.
    monkeypatch.setattr(training, "train", _capture)
    argv = [*_command()["argv"], "--output-dir", str(tmp_path / "run")]
    with pytest.raises(_Captured) as captured:
        train_script.main(argv)
    assert captured.value.args[0].resolve().sections() == saved
