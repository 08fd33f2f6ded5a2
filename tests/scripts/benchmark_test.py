import json

import pytest


@pytest.fixture(scope="module")
def bench_script(benchmark_script):
    return benchmark_script


# The benchmark's whole training table: each variant trained and timed,
# XLA compiles included (a minute on two cores). The slow tier; CI runs it
# (.ci/run).
@pytest.mark.slow
@pytest.mark.heavy
def test_quick_benchmark_reports_every_ratio(bench_script, tmp_path):
    path = tmp_path / "bench.json"
    bench_script.main(
        [
            "--quick",
            "--variants",
            "a,b,c,e,f",
            "--steps-per-execution",
            "2",
            "--device",
            "cpu",
            "--json",
            str(path),
        ]
    )
    result = json.loads(path.read_text())
    assert result["device"] == "cpu"
    tiny = result["training"]["tiny"]
    # e (mixed precision) needs a GPU: skipped, not faked.
    assert sorted(tiny["variants"]) == ["a", "b", "c", "f"]
    assert tiny["steps_per_trial"] % 2 == 0
    for entry in tiny["variants"].values():
        assert entry["steps_per_sec"] > 0
        assert entry["images_per_sec"] == pytest.approx(
            entry["steps_per_sec"] * tiny["batch_size"]
        )
        assert entry["ratio_to_naive"] > 0 and entry["ratio_to_compute"] > 0
        assert entry["peak_memory_mib"] > 0
    assert tiny["variants"]["a"]["ratio_to_naive"] == pytest.approx(1.0)
    assert tiny["variants"]["f"]["ratio_to_compute"] == pytest.approx(1.0)
    sampling = result["sampling"]
    assert set(sampling["images_per_sec"]) == {"generate", "direct_call", "predict"}
    assert sampling["generate_vs_direct_call"] > 0
    assert sampling["generate_vs_predict"] > 0


def test_diagnose_entry(bench_script, capsys):
    output = bench_script.main(
        ["--diagnose", "digits", "--quick", "--steps-per-execution", "1"]
    )
    diagnosis = output["diagnosis"]
    assert diagnosis["verdict"] in ("input-bound", "compute-bound", "retracing")
    assert diagnosis["batch_size"] == 8
    assert diagnosis["environment"]["gpu_present"] is False
    assert "Verdict:" in capsys.readouterr().out


def test_bad_arguments(bench_script):
    with pytest.raises(SystemExit):
        bench_script.parse_args(["--models", "huge"])
    with pytest.raises(SystemExit):
        bench_script.parse_args(["--variants", "z"])


def test_components_time_each_block_in_each_framework(bench_script, capsys):
    import importlib.util

    output = bench_script.main(["--components", "--quick", "--device", "cpu"])
    with_torch = all(importlib.util.find_spec(m) for m in ("torch", "diffusers"))
    sides = ["keras-xla", "keras-graph"] + (["torch"] if with_torch else [])
    results = output["components"]
    assert list(results) == sides
    for side in sides:  # one 3x3 convolution and one GroupNorm + SiLU, in ms
        assert len(results[side]["conv"]) == len(results[side]["norm"]) == 1
        assert all(ms > 0 for ms in results[side]["conv"] + results[side]["norm"])
    table = capsys.readouterr().out
    assert "conv 3x3 16x16, 16->16" in table and "GroupNorm+SiLU 16x16x16" in table
    assert ("torch/xla" in table) == with_torch
