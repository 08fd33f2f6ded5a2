"""The backup folder: a generation is committed in one step, a commit cut
short anywhere leaves the one before, and a damaged newest falls back."""

import json
import os

import h5py
import numpy as np
import pytest

from keras_diffusion.run import backup_folder
from keras_diffusion.utils import files

RECORD = backup_folder.RECORD_FILE


def _writer(value):
    """A `write_weights` that writes a tiny HDF5 file holding `value`."""

    def write(path):
        with h5py.File(path, "w") as f:
            f["w"] = np.full(3, value, np.float32)

    return write


def _value(folder, generation):
    with h5py.File(os.path.join(folder, generation.weights), "r") as f:
        return float(f["w"][0])


def test_each_commit_is_a_new_generation_and_the_newest_two_are_kept(tmp_path):
    for i, (epoch, step) in enumerate([(0, 3), (1, 0), (1, 3)]):
        backup_folder.commit(tmp_path, _writer(i), epoch, step, metrics=[[i]])
    newest = backup_folder.newest(tmp_path)
    assert (newest.number, newest.epoch, newest.step, newest.metrics) == (
        3,
        1,
        3,
        [[2]],
    )
    assert _value(tmp_path, newest) == 2.0  # the weights of its own commit
    assert [g.number for g in backup_folder.generations(tmp_path)] == [3, 2]
    assert sorted(os.listdir(tmp_path)) == [
        "gen-000002.weights.h5",
        "gen-000003.weights.h5",
        RECORD,
    ]


class _Killed(BaseException):
    """Stands for a kill: nothing after it runs (`atomic_write` does clean
    up its temporary; the fault-injection test kills for real)."""


def _raise(*args, **kwargs):
    raise _Killed


def _half_written(path):
    with open(path, "wb") as f:
        f.write(b"\x89HDF\r\n")
    raise _Killed


def _cut(monkeypatch, where):
    """The `write_weights` of a commit cut short `where`."""
    if where == "weights":
        return _half_written
    if where == "record":
        monkeypatch.setattr(backup_folder.files, "atomic_write", _raise)
    else:
        monkeypatch.setattr(backup_folder, "prune", _raise)
    return _writer(2.0)


@pytest.mark.parametrize(
    "where, expected",
    # (generation, epoch, step, weights) that a resume then reads.
    [
        ("weights", (1, 1, 0, 1.0)),
        ("record", (1, 1, 0, 1.0)),
        ("prune", (2, 1, 5, 2.0)),
    ],
)
def test_a_commit_cut_short_leaves_a_whole_generation(
    tmp_path, monkeypatch, where, expected
):
    backup_folder.commit(tmp_path, _writer(1.0), 1, 0)
    with pytest.raises(_Killed):
        backup_folder.commit(tmp_path, _cut(monkeypatch, where), 1, 5)
    monkeypatch.undo()
    newest = backup_folder.newest(tmp_path)
    assert (newest.number, newest.epoch, newest.step) == expected[:3]
    assert _value(tmp_path, newest) == expected[3]
    # The leftovers go at the next prune; the committed files stay.
    backup_folder.prune(tmp_path)
    kept = {g.weights for g in backup_folder.generations(tmp_path)} | {RECORD}
    assert set(os.listdir(tmp_path)) == kept
    assert backup_folder.newest(tmp_path) == newest


def test_damaged_newest_weights_fall_back_to_the_generation_before(tmp_path):
    backup_folder.commit(tmp_path, _writer(1.0), 1, 0)
    damaged = backup_folder.commit(tmp_path, _writer(2.0), 2, 0)
    with open(tmp_path / damaged.weights, "r+b") as f:
        f.truncate(100)
    newest = backup_folder.newest(tmp_path)
    assert (newest.epoch, _value(tmp_path, newest)) == (1, 1.0)
    os.remove(tmp_path / newest.weights)
    with pytest.raises(ValueError, match=r"truncated or corrupt.*--overwrite"):
        backup_folder.newest(tmp_path)


def test_an_empty_or_missing_folder_holds_no_generation(tmp_path):
    assert backup_folder.newest(tmp_path / "none") is None
    assert backup_folder.newest(tmp_path) is None
    (tmp_path / RECORD).write_text('{"epo')  # not a record
    assert backup_folder.newest(tmp_path) is None


# An earlier release's folder: latest.weights.h5 + training_metadata.json,
# with the .bkp pair. Its writer renamed the weights to .bkp, the record to
# .bkp, then moved the new pair in; each state a kill could leave:
_LEGACY_STATES = {
    "whole": ({"h5": 2, "json": 2, "h5.bkp": 1, "json.bkp": 1}, 2),
    "weights moved aside": ({"json": 2, "h5.bkp": 2, "json.bkp": 1}, 2),
    "record moved aside": ({"h5.bkp": 2, "json.bkp": 2}, 2),
    "new weights in": ({"h5": 3, "h5.bkp": 2, "json.bkp": 2}, 2),
}


@pytest.mark.parametrize("state", list(_LEGACY_STATES))
def test_an_earlier_release_folder_resumes_from_a_matching_pair(tmp_path, state):
    present, epoch = _LEGACY_STATES[state]
    for name, value in present.items():
        kind, _, suffix = name.partition(".")
        path = tmp_path / (
            ("latest.weights.h5" if kind == "h5" else RECORD)
            + ("." + suffix if suffix else "")
        )
        if kind == "h5":
            _writer(float(value))(str(path))
        else:
            path.write_text(json.dumps({"epoch": value, "step": 0}))
    (tmp_path / "next.training_metadata.json").write_text('{"epoch": 3}')
    newest = backup_folder.newest(tmp_path)
    assert (newest.epoch, _value(tmp_path, newest)) == (epoch, float(epoch))
    backup_folder.prune(tmp_path)  # at resume: the pair is kept
    assert backup_folder.newest(tmp_path) == newest
    backup_folder.commit(tmp_path, _writer(9.0), 3, 0)
    kept = {RECORD, "gen-000001.weights.h5", newest.weights}
    assert set(os.listdir(tmp_path)) == kept
    assert backup_folder.generations(tmp_path)[1].epoch == epoch


def test_remove_takes_the_whole_folder_in_one_rename(tmp_path, monkeypatch):
    backup = tmp_path / "backup"
    backup_folder.commit(backup, _writer(1.0), 1, 0)
    renames = []
    real = os.rename

    def rename(source, target):
        renames.append(os.path.basename(target))
        real(source, target)
        raise _Killed  # killed right after the rename

    monkeypatch.setattr(backup_folder.os, "rename", rename)
    with pytest.raises(_Killed):
        backup_folder.remove(backup)
    assert not backup.exists()
    (leftover,) = os.listdir(tmp_path)
    assert files.is_temporary(leftover) and leftover == renames[0]
    assert files.remove_temporaries(tmp_path) == [leftover]
    assert os.listdir(tmp_path) == []


def test_a_commit_keeps_the_readable_generation_beside_it(tmp_path):
    backup_folder.commit(tmp_path, _writer(1.0), 1, 0)
    damaged = backup_folder.commit(tmp_path, _writer(2.0), 2, 0)
    with open(tmp_path / damaged.weights, "r+b") as f:
        f.truncate(100)
    backup_folder.commit(tmp_path, _writer(3.0), 2, 1)
    # Kept beside the newest: generation 1, the one a resume would have used.
    assert [g.number for g in backup_folder.generations(tmp_path)] == [3, 1]
    assert not (tmp_path / damaged.weights).exists()
