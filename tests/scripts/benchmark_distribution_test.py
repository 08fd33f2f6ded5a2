"""`scripts/benchmark.py --distribution` (per-epoch times, the bimodal flag) and
`benchmarks.jit_models` (XLA against graph mode per denoiser)."""

import json

import pytest

from benchmarks import distribution_report as report


def test_two_modes_are_split_and_flagged():
    fast, slow = [0.020 + 0.0005 * i for i in range(10)], [0.0395] * 8
    summary = report.summarize(fast + slow)
    assert summary["bimodal"] and summary["slow_epochs"] == 8
    assert summary["fast_median"] == pytest.approx(0.02225)
    assert summary["slow_median"] == pytest.approx(0.0395)
    text = report.format_distribution(
        {"bare": {"epoch_seconds": fast + slow, "summary": summary}}
    )
    assert "BIMODAL" in text and "Bimodal: bare" in text


@pytest.mark.parametrize(
    "values",
    [
        [0.020, 0.021, 0.022, 0.023, 0.024, 0.025],  # noise, no gap
        [0.020] * 39 + [0.040],  # one outlier of 40 epochs: not a mode
    ],
)
def test_one_mode_is_not_bimodal(values):
    summary = report.summarize(values)
    assert not summary["bimodal"] and summary["slow_epochs"] == 0
    assert summary["fast_median"] == summary["all_median"]


def test_the_histogram_counts_every_epoch():
    values = [0.020] * 5 + [0.040] * 3
    lines = report.text_histogram(values, min(values), max(values), bins=4)
    assert [int(line.split()[-1]) for line in lines] == [5, 0, 0, 3]


def test_distribution_runs_fresh_processes(benchmark_script, tmp_path):
    path, plot = tmp_path / "d.json", tmp_path / "d.png"
    benchmark_script.main(
        ["--distribution", "bare-no-autotune", "--epochs", "2", "--processes", "1",
         "--json", str(path), "--plot", str(plot)]
    )  # fmt: skip
    result = json.loads(path.read_text())["distribution"]["bare-no-autotune"]
    assert len(result["epoch_seconds"]) == 2 and result["summary"]["epochs"] == 2
    assert all(s > 0 for s in result["epoch_seconds"])
    assert plot.stat().st_size > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--distribution", "bare,nope"],
        ["--distribution", "bare", "--distribution-model", "small"],  # conv only
        ["--distribution", "fit", "--distribution-model", "huge"],
        ["--distribution", "fit", "--epochs", "0"],
    ],
)
def test_bad_distribution_arguments_are_refused(benchmark_script, argv, capsys):
    with pytest.raises(SystemExit):
        benchmark_script.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_jit_models_times_both_forms_of_a_denoiser():
    from benchmarks import jit_models
    from keras_diffusion.trainers import jit_choice

    result = jit_models.measure("tiny-conv")
    assert result["graph_step_ms"] > 0 and result["xla_step_ms"] > 0
    assert result["graph_first_call_s"] > 0 and result["xla_first_call_s"] > 0
    margin = 1.0 - jit_choice.XLA_MARGIN
    faster = result["xla_step_ms"] < result["graph_step_ms"] * margin
    assert result["kept"] == ("XLA" if faster else "graph mode")
