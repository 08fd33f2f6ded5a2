"""DiffusionModel under MirroredStrategy and MultiWorkerMirroredStrategy.

The strategies need two logical CPUs or a `TF_CONFIG` set before TensorFlow
initialises its devices, so the scenarios run in subprocesses (`worker.py`);
`TF_CONFIG` checks run here.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_diffusion.distribute import strategy as distribute

WORKER = Path(__file__).with_name("worker.py")
REPO = WORKER.parents[2]
MIRRORED_TIMEOUT = 240
WORKER_TIMEOUT = 150


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), env.get("PYTHONPATH")) if p
    )
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _tail(text, lines=40):
    return "\n".join((text or "").splitlines()[-lines:])


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """Results of every scenario of `worker.py mirrored`, run once."""
    out = tmp_path_factory.mktemp("mirrored") / "results.json"
    try:
        proc = subprocess.run(
            [sys.executable, str(WORKER), "mirrored", str(out)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=MIRRORED_TIMEOUT,
        )
        log = proc.stderr
    except subprocess.TimeoutExpired as error:
        log = f"timed out after {MIRRORED_TIMEOUT}s\n{error.stderr}"
    results = json.loads(out.read_text()) if out.exists() else {}
    return results, log


def _check(mirrored, name):
    results, log = mirrored
    if name not in results:
        pytest.fail(f"scenario {name!r} did not report; worker log:\n{_tail(log)}")
    assert results[name]["ok"], results[name]["error"]


@pytest.mark.slow
def test_mirrored_matches_one_device(mirrored):
    # Same global batch and per-example noise: weights, EMA and loss match one
    # device (SGD, so a loss scaled by the replica count would show), and the
    # EMA agrees on both replicas.
    _check(mirrored, "parity")


@pytest.mark.slow
def test_indivisible_global_batch_is_split_unevenly_and_exact(mirrored):
    # 11 images in batches of 5 on two replicas: 3+2, 3+2, then 1 and an
    # empty batch; neither dropped nor padded, and the update equals one
    # device's.
    _check(mirrored, "uneven")


@pytest.mark.slow
def test_replicas_draw_different_noise_reproducibly(mirrored):
    _check(mirrored, "replica_noise")


@pytest.mark.slow
def test_save_load_and_generate_under_strategy(mirrored):
    _check(mirrored, "save_load")


@pytest.mark.slow
def test_model_built_outside_scope_fails_at_fit(mirrored):
    _check(mirrored, "scope_errors")


@pytest.mark.slow
def test_unbuilt_subclassed_denoiser_is_built_in_scope_and_trains(mirrored):
    _check(mirrored, "subclassed")


@pytest.mark.slow
def test_edm_and_flow_train_save_and_sample_under_strategy(mirrored):
    _check(mirrored, "edm")


@pytest.mark.slow
def test_text_model_fits_a_step_and_samples_under_strategy(mirrored):
    _check(mirrored, "text")


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _load_worker_module():
    spec = importlib.util.spec_from_file_location("distribute_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _image_folder(folder, count):
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(count):
        pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
        Image.fromarray(pixels, "L").save(folder / f"{i:02d}.png")
    return folder


def _unflat(data, prefix, like):
    got = {
        key: [data[f"{prefix}{key}_{i}"] for i in range(len(like[key]))]
        for key in ("weights", "ema")
    }
    got["loss"] = data[f"{prefix}loss"]
    return got


@pytest.mark.slow
@pytest.mark.heavy
def test_two_workers_match_one_worker(tmp_path):
    # Two fits on each worker: arrays (Keras' sharding), then an image folder
    # through its decode cache, built here, read by both workers: 13 images
    # in global batches of 6, so the last batch is 1 image and an empty one.
    worker = _load_worker_module()
    folder = _image_folder(tmp_path / "images", 13)
    cache = tmp_path / "cache"
    worker.cached_folder(folder, cache)
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    procs, outs, logs = [], [], []
    for index in range(2):
        config = {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        outs.append(tmp_path / f"worker{index}.npz")
        logs.append(tmp_path / f"worker{index}.log")
        with open(logs[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(WORKER), "multiworker", str(outs[-1])]
                    + [str(folder), str(cache)],
                    env=_env(TF_CONFIG=json.dumps(config)),
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            )
    # A worker left alone waits for its peer forever: stop both on a timeout
    # or as soon as one fails.
    deadline = time.monotonic() + WORKER_TIMEOUT
    try:
        while any(proc.poll() is None for proc in procs):
            failed = any(proc.returncode not in (None, 0) for proc in procs)
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for index, proc in enumerate(procs):
        assert proc.returncode == 0, (
            f"worker {index} exited with {proc.returncode} (killed after "
            f"{WORKER_TIMEOUT}s or when its peer failed):\n"
            f"{_tail(logs[index].read_text())}"
        )

    one = tf.distribute.get_strategy()
    want = worker.train(worker.make_model(one), worker.images(16))
    want_cached = worker.train_ordered(
        worker.make_model(one), worker.cached_folder(folder, cache)
    )
    read = []
    for out in outs:
        data = np.load(out)
        assert int(data["cache_steps"]) == 2 * 3
        worker.assert_same_training(_unflat(data, "", want), want)
        # The same data order as one process: same weights, EMA and losses.
        worker.assert_same_training(_unflat(data, "cache_", want_cached), want_cached)
        read.append(data["cache_read"])
    # Each worker read its half of every batch: together, each image once
    # an epoch (2 epochs), and neither worker read the whole data set.
    both = np.concatenate(read)
    np.testing.assert_array_equal(np.bincount(both, minlength=13), [2] * 13)
    assert all(len(rows) < 26 for rows in read), [len(rows) for rows in read]


# TF_CONFIG and strategy names, in this process.

GOOD = {
    "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
    "task": {"type": "worker", "index": 1},
}


def test_parse_tf_config_accepts_two_workers():
    assert distribute.parse_tf_config(json.dumps(GOOD)) == GOOD


def _config(workers=("a:1",), task_type="worker", index=0, **task):
    task = {"type": task_type, "index": index, **task}
    workers = workers if isinstance(workers, str) else list(workers)
    return json.dumps({"cluster": {"worker": workers}, "task": task})


@pytest.mark.parametrize(
    "text, match",
    [
        ('{"cluster": {"worker": ["a:1"]}, "task": ', "not valid JSON"),
        ('["a:1"]', "must be a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', "needs a 'cluster' object"),
        ('{"cluster": {"worker": ["a:1"]}}', "needs a 'task' object"),
        ('{"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}}', "'worker' list"),
        (_config(workers=()), "non-empty list"),
        (_config(workers="a:1"), "non-empty list"),
        (_config(workers=("a",)), "not 'host:port'"),
        (_config(workers=("a:b",)), "not 'host:port'"),
        (_config(task_type="chief"), "'type' naming a job"),
        (_config(index=None), "index=None"),
        (_config(workers=("a:1", "b:1"), index=2), r"in \[0, 2\).*index=2"),
        (_config(index=-1), "index=-1"),
        (_config(index="0"), "index='0'"),
    ],
)
def test_parse_tf_config_rejects_malformed(text, match):
    with pytest.raises(ValueError, match=match):
        distribute.parse_tf_config(text)


def test_multiworker_checks_tf_config_first(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG environment variable"):
        distribute.make_strategy("multiworker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        distribute.make_strategy("multiworker")


def test_make_strategy_names():
    assert distribute.make_strategy("none") is tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="name='gpu'"):
        distribute.make_strategy("gpu")
