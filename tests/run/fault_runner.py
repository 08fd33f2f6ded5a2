"""Kills tiny training runs at a chosen file operation, then runs them again.

The way storage engines are tested: every file operation of a run (a
rename, a removal, a folder made, a file opened for writing, a sync) is
numbered, and the process is killed (`os._exit`, no clean-up of any kind)
just before or just after one of them; then the same run is started again
with nothing killed, and it must resume from a whole state and end with the
weights of a run that was never interrupted.

    python fault_runner.py PLAN.json RESULTS.json

The hook is here, not in the library: `_Hook` patches `os`, `io`, `builtins`
and `shutil` before `keras_diffusion` is imported, and counts only what
happens in the run folder. It is armed by environment variables
(`KD_FAULT_ROOT`, the run folder; `KD_FAULT_AT`, the operation killed;
`KD_FAULT_WHEN`, `before` or `after` it; `KD_FAULT_LOG`, a file listing every
operation), which this runner sets in each run it starts.

To keep dozens of runs within a test's time, TensorFlow is imported once and
each run is a `fork` of this process (no TensorFlow op runs before the
fork), with tf.functions run eagerly: tracing the train step costs more than
the few steps of a tiny run, and the file operations are the same.

PLAN: a list of plans, each `{"root": folder of its runs, "images": an
image folder, "config": TrainConfig arguments, "train": more arguments of
train(), "points": [kill point, ...] or "all"}`, all run by this one process
(one TensorFlow start-up); a kill point is `{"op": "replace", "path":
"config.json", "nth": 0, "when": "before"}` (the `nth` operation of that
kind on that path, temporaries' random names written `*`) or `{"at": N,
"when": "after"}`. RESULTS: a list, one `{"operations": [...], "reference":
{...}, "trials": [...]}` a plan, described in `_count` and `_trial`.
"""

import builtins
import io
import json
import os
import re
import shutil
import sys
import threading
import traceback

KILLED = 99  # the exit status of a run killed by the hook
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_RANDOM = re.compile(r"\.[a-z0-9_]{8}\.tmp")


class _Hook:
    """Numbers the file operations under `KD_FAULT_ROOT`; kills at one."""

    def __init__(self):
        self.root = None
        self.at = None
        self.when = "before"
        self.log = None
        self.base = None
        self.count = 0
        self.local = threading.local()
        self.lock = threading.Lock()

    def arm(self):
        """Reads the environment: counting starts."""
        self.base = os.path.abspath(os.environ["KD_FAULT_ROOT"])
        self.root = self.base + os.sep
        at = os.environ.get("KD_FAULT_AT")
        self.at = None if at is None else int(at)
        self.when = os.environ.get("KD_FAULT_WHEN", "before")
        log = os.environ.get("KD_FAULT_LOG")
        self.log = None if log is None else builtins_open(log, "a")
        self.count = 0

    def disarm(self):
        self.root = None

    def watched(self, path):
        if self.root is None or isinstance(path, int):
            return None
        try:
            path = os.path.abspath(os.fsdecode(os.fspath(path)))
        except TypeError:
            return None
        return path if path.startswith(self.root) or path == self.base else None

    def shown(self, path):
        return _RANDOM.sub(".*.tmp", os.path.relpath(path, self.base))

    def __call__(self, op, path, call, source=None):
        """Runs `call()`, the operation `op` on `path`, counted when watched
        and not inside another counted one."""
        path = self.watched(path)
        if path is None or getattr(self.local, "inside", False):
            return call()
        with self.lock:  # one numbering, whichever thread writes
            self.count += 1
            index = self.count
        if index == self.at and self.when == "before":
            os._exit(KILLED)
        self.local.inside = True
        error = None
        try:
            result = call()
        except OSError as raised:  # such as os.mkdir on a folder that exists
            error = raised
        finally:
            self.local.inside = False
        if self.log is not None:
            self._record(index, op, path, source, error)
        if index == self.at and self.when == "after":
            os._exit(KILLED)
        if error is not None:
            raise error
        return result

    def _record(self, index, op, path, source, error):
        entry = {"i": index, "op": op, "path": self.shown(path)}
        if source is not None:
            entry["source"] = self.shown(os.path.abspath(os.fspath(source)))
        if error is not None:
            entry["error"] = type(error).__name__
        elif op == "replace" and os.path.basename(path) == "training_metadata.json":
            with builtins_open(path) as f:
                record = json.load(f)
            entry["committed"] = [record["generation"], record["epoch"], record["step"]]
        self.log.write(json.dumps(entry) + "\n")
        self.log.flush()


HOOK = _Hook()
builtins_open = builtins.open


def _install():
    real = {
        name: getattr(os, name)
        for name in ("replace", "rename", "remove", "unlink", "rmdir", "mkdir")
    }
    real_open, real_fsync = os.open, os.fsync
    real_rmtree, real_move = shutil.rmtree, shutil.move

    def two(name):
        def op(src, dst, *args, **kwargs):
            return HOOK(name, dst, lambda: real[name](src, dst, *args, **kwargs), src)

        return op

    def one(name):
        def op(path, *args, **kwargs):
            return HOOK(name, path, lambda: real[name](path, *args, **kwargs))

        return op

    def os_open(path, flags, *args, **kwargs):
        call = lambda: real_open(path, flags, *args, **kwargs)  # noqa: E731
        return HOOK("open", path, call) if flags & _WRITE_FLAGS else call()

    def fsync(fd):
        try:
            path = os.readlink(
                f"/proc/self/fd/{int(getattr(fd, 'fileno', lambda: fd)())}"
            )
        except OSError:
            path = None
        return HOOK("fsync", path, lambda: real_fsync(fd))

    def file_open(file, mode="r", *args, **kwargs):
        call = lambda: builtins_open(file, mode, *args, **kwargs)  # noqa: E731
        return HOOK("open", file, call) if set(mode) & set("wax+") else call()

    os.replace, os.rename = two("replace"), two("rename")
    for name in ("remove", "unlink", "rmdir", "mkdir"):
        setattr(os, name, one(name))
    os.open, os.fsync = os_open, fsync
    builtins.open = io.open = file_open
    shutil.rmtree = lambda path, *a, **k: HOOK(
        "rmtree", path, lambda: real_rmtree(path, *a, **k)
    )
    shutil.move = lambda src, dst, *a, **k: HOOK(
        "move", dst, lambda: real_move(src, dst, *a, **k), src
    )


_install()

# Imported only now, so that every module sees the patched functions.
import numpy as np  # noqa: E402

from keras_diffusion.run import backup_folder, training  # noqa: E402
from keras_diffusion.run import config as train_config  # noqa: E402
from keras_diffusion.run import folder as run_folder  # noqa: E402
from keras_diffusion.utils import files  # noqa: E402


def _run_child(body, env):
    """Runs `body()` in a forked child with `env` set; returns its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            os.environ.update(env)
            import tensorflow as tf

            tf.config.run_functions_eagerly(True)
            body()
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _train(plan, out, messages):
    config = train_config.TrainConfig(data_dir=plan["images"], **plan["config"])
    return training.train(config, out, verbose=0, log=messages.append, **plan["train"])


def _leftovers(out):
    """Writers' temporaries under `out`, and backup files no record names."""
    found = set()
    for folder, names, file_names in os.walk(out):
        found |= {
            os.path.relpath(os.path.join(folder, n), out)
            for n in names + file_names
            if files.is_temporary(n)
        }
    backup = os.path.join(out, run_folder.BACKUP_DIR)
    if os.path.isdir(backup):
        named = {g.weights for g in backup_folder.generations(backup)}
        found |= {
            os.path.join(run_folder.BACKUP_DIR, n)
            for n in os.listdir(backup)
            if n not in named | {backup_folder.RECORD_FILE}
        }
    return sorted(found)


def _finish(plan, out, report):
    """The run started again, nothing killed: what it found, what it did."""
    run = run_folder.RunFolder(out)
    report["state"] = run.state()
    newest = (
        backup_folder.newest(run.backup_dir) if report["state"] != "empty" else None
    )
    report["restored"] = None if newest is None else [
        newest.number, newest.epoch, newest.step
    ]  # fmt: skip
    report["leftovers_before"] = _leftovers(out)
    messages = []
    try:
        model = _train(plan, out, messages).model
        report["outcome"] = "resumed" if report["state"] != "empty" else "fresh"
    except ValueError as error:
        if "holds a finished run" not in str(error):
            raise
        report["outcome"] = "finished"
        model = files.load_model(os.path.join(out, run_folder.MODEL_FILE))
    report["messages"] = [m for m in messages if "esum" in m or "interrupted" in m]
    HOOK.disarm()
    report["leftovers_after"] = _leftovers(out)
    report["backup_left"] = os.path.exists(run.backup_dir)
    report["files"] = sorted(os.listdir(out))
    np.savez(out + ".npz", **_result_arrays(model, out))
    with builtins_open(out + ".json", "w") as f:
        json.dump(report, f)


def _result_arrays(model, out):
    """The model's weights (its EMA profiles' included) and the arrays of
    every post-hoc EMA snapshot the run folder holds, by name."""
    arrays = {f"weight_{i}": w for i, w in enumerate(model.get_weights())}
    snapshots = os.path.join(out, "posthoc_ema")
    for name in sorted(os.listdir(snapshots)) if os.path.isdir(snapshots) else []:
        with np.load(os.path.join(snapshots, name)) as f:
            arrays.update({f"{name}/{key}": f[key] for key in f.files})
    return arrays


def _count(plan):
    """The uninterrupted run, every operation listed: `operations` (index,
    kind, path and, for a backup commit, the generation, epoch and step it
    committed) and the reference weights and log."""
    out = os.path.join(plan["root"], "reference")
    log = out + ".ops"

    def body():
        HOOK.arm()
        _finish(plan, out, {"name": "reference"})

    env = {"KD_FAULT_ROOT": out, "KD_FAULT_LOG": log}
    if _run_child(body, env) != 0:
        raise RuntimeError("the uninterrupted run failed")
    with builtins_open(log) as f:
        operations = [json.loads(line) for line in f]
    with builtins_open(out + ".json") as f:
        reference = json.load(f)
    return operations, dict(reference, weights=out + ".npz", log=out + "/log.csv")


def _resolve(point, operations):
    """The operation index of a kill point."""
    if "at" in point:
        return point["at"]
    matches = [
        o["i"]
        for o in operations
        if o["op"] == point["op"] and o["path"] == point["path"]
    ]
    if len(matches) <= point.get("nth", 0):
        raise ValueError(f"no operation {point} among {len(operations)}")
    return matches[point.get("nth", 0)]


def _trial(plan, index, when, operations):
    """Killed `when` operation `index`, then run again: the killed run's
    status, and `_finish`'s report."""
    name = f"kill-{index:03d}-{when}"
    out = os.path.join(plan["root"], name)

    def killed():
        HOOK.arm()
        _train(plan, out, [])

    env = {"KD_FAULT_ROOT": out, "KD_FAULT_AT": str(index)}
    env["KD_FAULT_WHEN"] = when
    status = _run_child(killed, env)
    report = {"name": name, "at": index, "when": when, "killed": status == KILLED}
    report["operation"] = operations[index - 1]
    if _run_child(lambda: _finish(plan, out, report), {}) != 0:
        return dict(report, outcome="failed")
    with builtins_open(out + ".json") as f:
        return dict(json.load(f), weights=out + ".npz", log=out + "/log.csv")


def _run_plan(plan):
    """The uninterrupted run, then each kill point's trial."""
    operations, reference = _count(plan)
    if plan["points"] == "all":
        points = [
            (i, w) for i in range(1, len(operations) + 1) for w in ("before", "after")
        ]
    else:
        points = [(_resolve(p, operations), p["when"]) for p in plan["points"]]
    trials = [_trial(plan, i, when, operations) for i, when in points]
    return {"operations": operations, "reference": reference, "trials": trials}


def main(plan_path, results_path):
    with builtins_open(plan_path) as f:
        plans = json.load(f)
    results = [_run_plan(plan) for plan in plans]
    with builtins_open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
