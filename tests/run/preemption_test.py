"""Step backups and stops on a signal: a resume in the middle of an epoch
trains as the uninterrupted run does (losses and weights)."""

import os
import signal

import keras
import numpy as np
import pytest

from keras_diffusion import DiffusionModel
from keras_diffusion.data import from_arrays
from keras_diffusion.data.ordered import EpochOrder
from keras_diffusion.run import backup_folder, preemption
from tests.denoisers import conv_denoiser

EPOCHS = 2  # of 10 steps: 40 images, batches of 4


def training_module():
    """keras_diffusion.run.training, whose `train` scripts/train.py calls
    (imported after its flags are parsed)."""
    from keras_diffusion.run import training

    return training


def _model(steps_per_execution, schedule=None, accumulate=None):
    keras.utils.set_random_seed(0)
    # A conv denoiser: what a backup saves and when does not depend on the
    # denoiser (weights, optimizer, EMA and noise seed are the model's), and
    # it traces in a fraction of a U-Net's time (a U-Net's run resumes in
    # tests/run/fault_injection_test.py and tests/scripts/preempt_test.py).
    time_inputs = getattr(schedule, "time_inputs", 1)
    model = DiffusionModel(conv_denoiser(time_inputs=time_inputs), schedule, seed=0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3, gradient_accumulation_steps=accumulate),
        jit_compile=False,
        steps_per_execution=steps_per_execution,
    )
    return model


def _data():
    images = np.random.default_rng(0).integers(0, 256, (40, 8, 8), np.uint8)
    return from_arrays(images, batch_size=4, seed=5, flip=True)


class _Losses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.by_epoch = {}

    def on_epoch_end(self, epoch, logs=None):
        self.by_epoch[epoch] = float(logs["loss"])


class _SignalAt(keras.callbacks.Callback):
    """Sends this process SIGTERM as the first compiled call that starts with
    `step` or more optimizer steps done begins: the signal arrives while the
    call runs."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_begin(self, batch, logs=None):
        done = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if done >= self.step:
            self.step = float("inf")
            os.kill(os.getpid(), signal.SIGTERM)


def _train(
    backup_dir,
    steps_per_execution,
    signal_at=None,
    log=None,
    schedule=None,
    accumulate=None,
):
    """`(model, losses by epoch, the Preempted message or None)` of a run of
    `EPOCHS` (on `schedule`, a `NoiseSchedule` by default; an update every
    `accumulate` batches)."""
    model, losses = _model(steps_per_execution, schedule, accumulate), _Losses()
    callbacks = [losses] + ([_SignalAt(signal_at)] if signal_at else [])
    with preemption.stop_on_signals(log=log or (lambda message: None)) as stop:
        backup = preemption.StepBackup(backup_dir, stop=stop)
        try:
            preemption.fit_resumable(
                model, _data(), EpochOrder(5), EPOCHS, backup, callbacks, verbose=0
            )
        except preemption.Preempted as error:
            return model, losses.by_epoch, str(error)
    return model, losses.by_epoch, None


def resumed_difference(tmp_path, schedule):
    """Max |dw| between a run on `schedule` stopped by SIGTERM in the middle
    of its second epoch (during a compiled call of 4 steps) and resumed from
    its step backup, and the uninterrupted run."""
    whole, _, message = _train(tmp_path / "a", 4, schedule=schedule)
    assert message is None
    _, _, message = _train(tmp_path / "b", 4, signal_at=12, schedule=schedule)
    newest = backup_folder.newest(tmp_path / "b")
    # Stopped in the middle of the second epoch (of 10 steps).
    assert message and (newest.epoch, 0 < newest.step < 10) == (1, True)
    resumed, _, message = _train(tmp_path / "b", 4, schedule=schedule)
    assert message is None
    return _max_difference(whole, resumed)


def test_a_resume_in_the_middle_of_an_accumulation_equals_the_uninterrupted_run(
    tmp_path,
):
    # An update every 4 batches, compiled calls of 2: the SIGTERM comes as
    # update 3 is done (batch 12 of 20), and the call of batches 12-13 ends
    # with half of update 4's gradients accumulated. The backup holds the
    # optimizer's accumulators: the resume ends as the uninterrupted run.
    whole, _, message = _train(tmp_path / "a", 2, accumulate=4)
    assert message is None and int(whole.optimizer.iterations) == 5
    _, _, message = _train(tmp_path / "b", 2, signal_at=3, accumulate=4)
    newest = backup_folder.newest(tmp_path / "b")
    assert message and (newest.epoch, newest.step) == (1, 4)
    resumed, _, message = _train(tmp_path / "b", 2, accumulate=4)
    assert message is None and int(resumed.ema.num_updates) == 5
    assert _max_difference(whole, resumed) <= 1e-6


def _max_difference(a, b):
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(a.get_weights(), b.get_weights(), strict=True)
    )


@pytest.mark.parametrize(
    "steps_per_execution, signal_at, stopped_at",
    # 8 a call: calls end at steps 8, 10, 18, 20, ...; the one from 10 to 18
    # gets the signal. One a call: the train() test below.
    [(8, 10, 8)],
)
def test_a_resume_mid_epoch_equals_the_uninterrupted_run(
    tmp_path, steps_per_execution, signal_at, stopped_at
):
    whole, whole_losses, message = _train(tmp_path / "a", steps_per_execution)
    assert message is None and sorted(whole_losses) == [0, 1]

    said = []
    _, first_losses, message = _train(
        tmp_path / "b", steps_per_execution, signal_at, log=said.append
    )
    assert f"Stopped by SIGTERM in epoch 2, after step {stopped_at} " in message
    assert len(said) == 1 and "SIGTERM: writing the resume state" in said[0]
    assert backup_folder.newest(tmp_path / "b").step == stopped_at
    resumed, resumed_losses, message = _train(tmp_path / "b", steps_per_execution)
    assert message is None
    losses = {**first_losses, **resumed_losses}
    for epoch in range(EPOCHS):
        assert abs(losses[epoch] - whole_losses[epoch]) <= 1e-6, (epoch, losses)
    difference = _max_difference(whole, resumed)
    print(f"steps_per_execution={steps_per_execution}: max |dw| = {difference:g}")
    assert difference <= 1e-6
    assert int(resumed.optimizer.iterations.numpy()) == EPOCHS * 10


def test_a_restore_loads_the_weights_of_its_own_generation(tmp_path):
    model = _model(1)
    backup = preemption.StepBackup(tmp_path)
    backup.set_model(model)
    backup.save(1, 0)
    saved = [np.array(w) for w in model.get_weights()]
    for w in model.weights:  # the next generation's weights differ
        w.assign(w + 1.0)
    backup.save(1, 4)
    os.remove(tmp_path / backup_folder.newest(tmp_path).weights)  # damaged
    fresh = _model(1)
    again = preemption.StepBackup(tmp_path)
    again.set_model(fresh)
    assert again.restore() == (1, 0)
    for a, b in zip(fresh.get_weights(), saved, strict=True):
        np.testing.assert_array_equal(a, b)


def test_every_steps_must_be_positive():
    with pytest.raises(ValueError, match="every_steps"):
        preemption.StepBackup("b", every_steps=0)


def test_a_second_signal_exits_at_once(monkeypatch):
    def exits(status):
        raise SystemExit(status)

    written = []
    monkeypatch.setattr(preemption.os, "_exit", exits)
    monkeypatch.setattr(preemption.os, "write", lambda fd, data: written.append(data))
    messages = []
    with preemption.stop_on_signals(log=messages.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signal_name == "SIGINT"
        assert messages == []  # the handler only records the request
        stop.announce()
        stop.announce()
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGTERM)
    assert exited.value.code == 128 + signal.SIGTERM
    assert len(messages) == 1 and "send it again to exit at once" in messages[0]
    assert b"SIGTERM again: exiting now" in written[0]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _folder_config(folder):
    from keras_diffusion.run import config as train_config

    # A one-level U-Net: a run's files and steps are those of any U-Net, and
    # its trace is shorter.
    return train_config.TrainConfig(
        dataset="folder", data_dir=str(folder), image_size=8, channels=1,
        batch_size=4, epochs=2, widths=[4], num_res_blocks=1,
        attention_levels=[False], num_samples=1, sampling_steps=1,
        jit_compile=False, steps_per_execution=1, seed=2,
    )  # fmt: skip


# CI time: covered end to end by tests/scripts/preempt_test.py (a real SIGTERM
# mid-epoch, resumed to the uninterrupted run's weights) and by
# tests/run/fault_injection_test.py (train() on a folder, resumed equal).
@pytest.mark.slow
@pytest.mark.heavy
def test_train_resumes_a_folder_run_mid_epoch_as_if_uninterrupted(tmp_path):
    from PIL import Image

    from keras_diffusion.run import training

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(24):  # 6 steps an epoch
        Image.fromarray(rng.integers(0, 256, (10, 8, 3), np.uint8)).save(
            folder / f"{i}.png"
        )
    config, quiet = _folder_config(folder), {"verbose": 0, "log": lambda m: None}
    whole = training.train(config, tmp_path / "whole", **quiet)
    with pytest.raises(preemption.Preempted, match="epoch 2, after step 2 "):
        training.train(
            config, tmp_path / "cut", callbacks=[_SignalAt(7)], **quiet,
            backup_every_steps=3,
        )  # fmt: skip
    assert (tmp_path / "cut" / "cache" / "manifest.json").exists()
    messages = []
    resumed = training.train(config, tmp_path / "cut", verbose=0, log=messages.append)
    assert any("in epoch 2/2 after step 2" in m for m in messages), messages
    difference = _max_difference(whole.model, resumed.model)
    print(f"train(), steps_per_execution=1: max |dw| = {difference:g}")
    assert difference <= 1e-6
    logs = [
        np.loadtxt(path, delimiter=",", skiprows=1, usecols=(0, 1))
        for path in (whole.log_path, resumed.log_path)
    ]
    np.testing.assert_allclose(logs[0], logs[1], atol=1e-6)


def test_backup_every_steps_is_checked_before_anything_is_written(tmp_path):
    from keras_diffusion.run import training

    for bad in (0, -3, 1.5):
        with pytest.raises(ValueError, match=f"backup_every_steps={bad!r}"):
            training.train(
                _folder_config(tmp_path), tmp_path / "run", backup_every_steps=bad
            )
    assert not (tmp_path / "run").exists()


def test_the_script_exits_75_when_stopped_by_a_signal(
    train_script, monkeypatch, capsys
):
    def stopped(*args, **kwargs):
        raise preemption.Preempted("Stopped by SIGTERM in epoch 2, after step 3")

    monkeypatch.setattr(training_module(), "train", stopped)
    assert train_script.main([]) == preemption.EXIT_PREEMPTED == 75
    assert "Stopped by SIGTERM in epoch 2" in capsys.readouterr().err
    assert "status 75" in train_script.build_parser().format_help()


@pytest.mark.parametrize(
    "flag, value, received",
    [
        ("--backup-every-steps", "0", "--backup-every-steps 0"),
        ("--backup-every-minutes", "-2", "--backup-every-minutes -2.0"),
    ],
)
def test_the_script_reports_a_bad_backup_interval_in_one_line(
    train_script, capsys, flag, value, received
):
    assert train_script.main([flag, value]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert received in line and flag in line


class _Clock:
    """`time.monotonic` that advances `step` seconds at each call."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def _recorded(backup):
    """`backup`, with the (epoch, step) of each write listed."""
    saved, save = [], backup.save

    def record(epoch, step):
        saved.append((epoch, step))
        save(epoch, step)

    backup.save = record
    return saved


@pytest.fixture(scope="module")
def one_step_model():
    """One compiled `_model(1)` for the tests of when backups are written:
    they read only the (epoch, step) of each write, which a model trained
    before does not change, and a model traced once saves a trace each."""
    return _model(1)


def test_every_seconds_backs_up_once_the_time_has_passed(
    tmp_path, monkeypatch, one_step_model
):
    # 10 s pass at each clock reading (one a step boundary, one at each
    # write's end); backups due every 25 s: steps 3, 6 and 9 of an epoch of
    # 10, then the epoch's end (nothing written twice at step 10).
    monkeypatch.setattr(preemption.time, "monotonic", _Clock(10.0))
    backup = preemption.StepBackup(tmp_path, every_seconds=25)
    saved = _recorded(backup)
    one_step_model.fit(_data(), epochs=1, callbacks=[backup], verbose=0)
    assert saved == [(0, 3), (0, 6), (0, 9), (1, 0)], saved


def test_every_steps_counts_on_the_host(tmp_path, monkeypatch):
    # 4 steps a call over epochs of 10 (calls end at steps 4, 8 and 10),
    # every 6 steps: after step 8 of each epoch, and at each epoch's end;
    # the device's step counter is never read.
    backup = preemption.StepBackup(tmp_path, every_steps=6)
    saved = _recorded(backup)
    monkeypatch.setattr(backup, "_steps_done", None)  # would fail if called
    _model(4).fit(_data(), epochs=2, callbacks=[backup], verbose=0)
    assert saved == [(0, 8), (1, 0), (1, 8), (2, 0)], saved
    newest = backup_folder.newest(tmp_path)
    assert (newest.epoch, newest.step) == (2, 0)


def _unknown_length():
    import tensorflow as tf

    images = _data().epoch_batches(EpochOrder(5))
    # A filter hides the length from Keras: `params["steps"]` is None.
    unknown = images.filter(lambda batch: True)
    assert int(unknown.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    return unknown


def test_data_of_unknown_length_is_backed_up_every_epoch(tmp_path, one_step_model):
    backup = preemption.StepBackup(tmp_path, every_steps=4)
    saved = _recorded(backup)
    one_step_model.fit(_unknown_length(), epochs=2, callbacks=[backup], verbose=0)
    # Steps 4 and 8 of each epoch of 10, each epoch's end.
    assert saved == [(0, 4), (0, 8), (1, 0), (1, 4), (1, 8), (2, 0)], saved


def test_a_stop_at_the_end_of_an_epoch_of_unknown_length_counts_its_steps(
    tmp_path, one_step_model
):
    stop = preemption.StopRequest()

    class StopAtLastStep(keras.callbacks.Callback):
        # After the backup's batch hook: the stop is seen at the epoch's end.
        def on_train_batch_end(self, batch, logs=None):
            if batch == 9:
                stop.request("SIGTERM")

    backup = preemption.StepBackup(tmp_path, stop=stop)
    with pytest.raises(preemption.Preempted, match="epoch 1, after step 10 "):
        one_step_model.fit(
            _unknown_length(),
            epochs=2,
            callbacks=[backup, StopAtLastStep()],
            verbose=0,
        )


def test_backup_intervals_must_be_positive():
    for bad in (0, -1.5, float("nan"), float("inf"), "10", True):
        with pytest.raises((ValueError, TypeError), match=f"every_seconds={bad!r}"):
            preemption.StepBackup("b", every_seconds=bad)
        with pytest.raises(ValueError, match=f"backup_every_minutes={bad!r}"):
            preemption.check_backup_intervals(None, bad)


def test_a_resume_on_changed_data_restarts_the_epoch_and_says_so(tmp_path):
    from PIL import Image

    from keras_diffusion.run import training

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)

    def write(name):
        pixels = rng.integers(0, 256, (8, 8, 3), np.uint8)
        Image.fromarray(pixels).save(folder / name)

    for i in range(24):  # 6 steps an epoch
        write(f"{i}.png")
    config, quiet = _folder_config(folder), {"verbose": 0, "log": lambda m: None}
    with pytest.raises(preemption.Preempted, match="epoch 2, after step 2 "):
        training.train(
            config, tmp_path / "run", callbacks=[_SignalAt(7)], **quiet
        )  # fmt: skip
    # Files added and removed: the epoch's positions now name other images.
    os.remove(folder / "3.png")
    for i in range(24, 28):
        write(f"{i}.png")
    messages = []
    resumed = training.train(config, tmp_path / "run", verbose=0, log=messages.append)
    changed = [m for m in messages if m.startswith("The data changed")]
    assert len(changed) == 1 and "24 examples then, 27 now" in changed[0]
    assert "epoch 2 cannot continue after its step 2" in changed[0], changed
    # Epoch 1 (6 steps), 2 steps of epoch 2, then all of epoch 2 on 27 images.
    assert int(resumed.model.optimizer.iterations.numpy()) == 6 + 2 + 7


def test_the_data_identity_sees_files_not_their_times(tmp_path):
    from keras_diffusion.data import identity

    class Folder:
        def __init__(self, paths):
            self.file_paths, self.num_examples = paths, len(paths)

    paths = []
    for name in ("a.png", "b.png"):
        (tmp_path / name).write_bytes(b"12345")
        paths.append(str(tmp_path / name))
    before = identity.identify(Folder(paths))
    os.utime(paths[0], (0, 0))  # copied to another host: other times
    assert not identity.changed(before, identity.identify(Folder(paths)))
    (tmp_path / "a.png").write_bytes(b"123456")
    assert identity.changed(before, identity.identify(Folder(paths)))
    os.rename(paths[1], tmp_path / "c.png")
    renamed = [paths[0], str(tmp_path / "c.png")]
    assert identity.changed(before, identity.identify(Folder(renamed)))
    assert identity.identify(object()) is None  # unknown length: not compared
    assert not identity.changed(before, None) and not identity.changed(None, before)
