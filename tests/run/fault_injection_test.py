"""A run killed before or after any of its file operations continues: the
same command resumes from the newest whole generation and ends with the
weights, log and files of a run that was never interrupted.

`fault_runner.py` (beside this file) counts the file operations of one
uninterrupted tiny folder run of `keras_diffusion.train` (8 images, 2 epochs
of 2 steps, a backup every step, post-hoc EMA snapshots every 2 steps, LoRA
of rank 2, whose backups hold the base weights and the factors apart; about
110 operations: the decode cache, config.json, data.png, log.csv, 4 backup
commits and their prunes, 2 snapshots, model.keras, samples.png, the
backup's removal), then kills a fresh run at each chosen operation and runs
it again without the kill: its weights (the EMA profiles' included), its
snapshots and the names of its files must be the uninterrupted run's. The
slow tier kills at the points where a wrong order would show (the commits
of every kind of file, a backup commit cut before and after its record, a
prune, the backup's removal) in a few-step run of that config, and in the
same runner process a text run (a captioned folder) after the files it
writes before config.json and inside its last backup commit; the test left
out of CI kills the plain run at every operation, before and after it.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

# The runner forks, and names a synced file through /proc/self/fd.
pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="the fault runner needs fork and /proc"
)
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_runner.py")
# A one-level U-Net: the file operations are those of any run, and each of
# the runs pays for each variable (eager steps, backup commits), 64 here
# against 104 with two levels. The text run takes it without LoRA and
# post-hoc EMA (the first run's): its U-Net attends to the captions in its
# middle block alone, and its text encoder already makes each of its runs
# the dearest.
CONFIG = {
    "dataset": "folder", "image_size": 8, "channels": 1, "batch_size": 4,
    "epochs": 2, "widths": [4], "num_res_blocks": 1,
    "attention_levels": [False], "num_samples": 1, "sampling_steps": 1,
    "jit_compile": False, "steps_per_execution": 1, "seed": 2,
    "posthoc_ema": True, "posthoc_snapshots": 2, "lora_rank": 2,
}  # fmt: skip
TEXT_CONFIG = {
    k: v
    for k, v in CONFIG.items()
    if k not in ("posthoc_ema", "posthoc_snapshots", "lora_rank")
}
SNAPSHOT = "posthoc_ema/snapshot-00000000{}.npz"
RECORD = "backup/training_metadata.json"


def _point(op, path, when, nth=0):
    return {"op": op, "path": path, "when": when, "nth": nth}


# (operation, path, before/after, which one of them): the commit of each file
# a run writes, and inside the backup commits, each step whose order matters.
POINTS = [
    _point("replace", "cache/manifest.json", "before"),  # images moved, no manifest
    _point("replace", "config.json", "before"),  # only the cache and a temporary
    _point("fsync", "backup/gen-000001.weights.h5", "before"),  # not committed
    _point("replace", RECORD, "before", nth=2),  # generation 3 cut: 2 is newest
    _point("remove", "backup/gen-000001.weights.h5", "before"),  # 3 committed
    _point("replace", SNAPSHOT.format(2), "before"),  # gen 1 (step 1) resumes
    # The run's last snapshot written, its backup not: the resume redoes the
    # last step and writes it again.
    _point("replace", SNAPSHOT.format(4), "after"),
    _point("replace", "model.keras", "before"),
    _point("rename", ".backup.*.tmp", "after"),  # finished
]
# The few-step schedule's curriculum moves with the optimizer's count (over
# the run's 4 updates), so a resume that restored the count wrong would end
# on other weights: the run killed at POINTS is a few-step one. CONFIG's run
# (the default schedule) is the one the sweep below kills at every point,
# and the text run at TEXT_POINTS takes the default schedule too.
FEW_STEP_CONFIG = {**CONFIG, "schedule": "consistency"}
# The text run's: after the files it writes before config.json (the folder
# is still empty: a fresh start), and generation 4 cut (3 restored: the run
# resumes in the middle of its second epoch, its captions skipped with their
# images).
TEXT_POINTS = [
    _point("replace", "prompts.json", "after"),
    _point("replace", RECORD, "before", nth=3),
]
# The sweep below kills before and after every operation, these included:
# config.json and data.png written, generation 1 committed, samples.png,
# the backup's removal begun.


def _images(folder):
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(8):  # 2 steps of 4 an epoch
        image = rng.integers(0, 256, (10, 8, 3), np.uint8)
        Image.fromarray(image).save(folder / f"{i}.png")
    return folder


def _captioned(folder):
    """`_images` with a metadata.jsonl: a text run's folder."""
    _images(folder)
    with open(folder / "metadata.jsonl", "w") as f:
        for i in range(8):
            caption = ["red heart", "cat face"][i % 2]
            f.write(json.dumps({"file_name": f"{i}.png", "text": caption}) + "\n")
    return folder


def _plan(folder, points, config=CONFIG, images=_images):
    """A plan of the runner: the runs under `folder`, on `images`' folder."""
    folder.mkdir()
    (folder / "runs").mkdir()
    return {
        "root": str(folder / "runs"),
        "images": str(images(folder / "images")),
        "config": config,
        "train": {"backup_every_steps": 1},
        "points": points,
    }


def _run_plans(tmp_path, *plans):
    """Runs `plans` in one runner process (one TensorFlow start-up); their
    results, in order."""
    (tmp_path / "plan.json").write_text(json.dumps(plans))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1")
    root_dir = os.path.dirname(os.path.dirname(os.path.dirname(RUNNER)))
    env["PYTHONPATH"] = root_dir + os.pathsep + env.get("PYTHONPATH", "")
    every = any(plan["points"] == "all" for plan in plans)
    result = subprocess.run(
        [sys.executable, RUNNER, str(tmp_path / "plan.json"), str(tmp_path / "r")],
        env=env,
        capture_output=True,
        text=True,
        timeout=6 * 3600 if every else 1800,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    with open(tmp_path / "r") as f:
        return json.load(f)


def _expected(operations, index, when):
    """`(state, generation)` a resume must find after a kill `when` operation
    `index`: the newest generation committed by then."""
    done = [
        o for o in operations if o["i"] < index or (o["i"] == index and when == "after")
    ]
    if any(o["op"] == "rename" and o.get("source") == "backup" for o in done):
        return "finished", None
    commits = [o["committed"] for o in done if "committed" in o]
    if commits:
        return "interrupted", commits[-1]
    if any(o["op"] == "replace" and o["path"] == "config.json" for o in done):
        return "interrupted", None
    return "empty", None


def _log(path):
    with open(path, newline="") as f:
        return [(int(r[0]), float(r[1])) for r in list(csv.reader(f))[1:]]


def _max_difference(a, b):
    a, b = np.load(a), np.load(b)
    assert sorted(a.files) == sorted(b.files)
    return max(float(np.max(np.abs(a[k] - b[k]), initial=0.0)) for k in a.files)


def _check(results):
    """Asserts every trial; prints and returns the table."""
    operations, reference = results["operations"], results["reference"]
    assert reference["outcome"] == "fresh" and not reference["leftovers_after"]
    reference_log = _log(reference["log"])
    assert [epoch for epoch, _ in reference_log] == [0, 1]
    rows = []
    for trial in results["trials"]:
        op = trial["operation"]
        killed = f"{trial['when']:6} {op['i']:3d} {op['op']:7} {op['path']}"
        assert trial["killed"], f"{killed}: the run was not killed"
        assert trial["outcome"] != "failed", f"{killed}: the rerun failed"
        state, generation = _expected(operations, trial["at"], trial["when"])
        restored = trial["restored"]
        found = (
            "-" if restored is None else "gen {} (epoch {}, step {})".format(*restored)
        )
        difference = _max_difference(reference["weights"], trial["weights"])
        left = len(trial["leftovers_before"])
        rows.append(
            f"{killed:58} {trial['state']:11} {found:26} {left:4d}  "
            f"{trial['outcome']:8} {difference:g}"
        )
        assert (trial["state"], restored) == (state, generation), killed
        assert trial["outcome"] == {"finished": "finished", "empty": "fresh"}.get(
            state, "resumed"
        ), killed
        assert trial["leftovers_after"] == [] and not trial["backup_left"], killed
        # Every file of the run (a text run's prompts.png and its prompts).
        assert trial["files"] == reference["files"], killed
        assert difference == 0.0, killed
        np.testing.assert_allclose(
            np.array(_log(trial["log"])), np.array(reference_log), atol=1e-6
        )
    header = (
        f"{'killed (when, index, operation, path)':58} {'state':11} "
        f"{'restored':26} left  {'outcome':8} max |dw|"
    )
    table = "\n".join([header, *rows])
    print(f"\n{len(operations)} file operations in the uninterrupted run\n{table}")
    return table


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_killed_at_each_commit_continues_to_the_same_weights(tmp_path):
    # Two runs in one runner process (one TensorFlow start-up): a few-step
    # run (LoRA, post-hoc EMA) at POINTS, whose objective moves with the
    # optimizer's count (its curriculum), so that each generation restores
    # it; a text run (a captioned folder, the default schedule), whose
    # vocabulary.json and prompts.json come before config.json. Each kind
    # its own run: a text model costs each run more than a plain one. The
    # few-step run's file operations are the plain run's (the same POINTS
    # resolve); one run of each kind, not a plain and a few-step run killed
    # at the same commits. In the default tier, a few-step run resumed from
    # its step backup ends as the uninterrupted one
    # (tests/schedules/consistency_schedule_test.py), and
    # tests/run/backup_folder_test.py commits and recovers generations.
    results = _run_plans(
        tmp_path,
        _plan(tmp_path / "run", POINTS, FEW_STEP_CONFIG),
        _plan(tmp_path / "text", TEXT_POINTS, TEXT_CONFIG, images=_captioned),
    )
    for result in results:
        _check(result)
    run, text = ([t["restored"] for t in r["trials"]] for r in results)
    # Inside the backups: generation 3 cut before its record (2 restored:
    # epoch 1, step 0), and the prune after it (3 restored: epoch 1, step 1).
    assert run[3:5] == [[2, 1, 0], [3, 1, 1]]
    assert text == [None, [3, 1, 1]]  # generation 3: epoch 1, step 1


@pytest.mark.slow
def test_a_run_killed_before_or_after_any_file_operation_continues(tmp_path):
    (results,) = _run_plans(tmp_path, _plan(tmp_path / "run", "all"))
    table = _check(results)
    output = os.environ.get("KD_FAULT_TABLE")
    if output:  # the table of record (docs or a report)
        with open(output, "w") as f:
            f.write(table + "\n")
