"""The PyTorch + diffusers peer of scripts/benchmark.py --peer."""

import json
import sys

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def peer(benchmark_script):
    from benchmarks import peer

    return peer


@pytest.mark.parametrize("name", ["tiny", "small", "mnist"])
def test_peer_unet_is_the_keras_unet_in_parameters(benchmark_script, peer, name):
    unet, _ = benchmark_script.benchmarks.build_unet(name)
    torch_unet = peer.diffusers_unet(unet.get_config())
    assert peer.check_parameters(torch_unet, unet.count_params()) == (
        unet.count_params()
    )


@pytest.mark.parametrize(
    "options",
    [
        # The digits preset, conditional: 10 classes and the null class.
        dict(widths=(16, 32, 64), num_res_blocks=1, num_classes=10),
        dict(widths=(8, 16), attention_levels=(False, True), num_heads=4, groups=4),
    ],
)
def test_peer_unet_options(peer, options):
    from keras_diffusion import UNet

    unet = UNet((16, 16, 1), **options)
    peer.check_parameters(peer.diffusers_unet(unet.get_config()), unet.count_params())


def test_peer_unet_refuses_what_diffusers_cannot_express(peer):
    config = dict(
        image_shape=(8, 8, 1),
        widths=(8, 16),
        attention_levels=(True, True),
        num_heads=2,
        num_res_blocks=1,
        groups=4,
    )
    with pytest.raises(ValueError, match="attention_head_dim"):
        peer.diffusers_unet(config)


def test_check_parameters_names_both_counts(peer, make_unet):
    unet = make_unet()
    torch_unet = peer.diffusers_unet(unet.get_config())
    with pytest.raises(ValueError, match="not the same network"):
        peer.check_parameters(torch_unet, unet.count_params() + 1)


def test_peer_timestep_sinusoid_is_keras_diffusions(peer, make_unet):
    import torch

    from keras_diffusion.layers import TimestepEmbedding

    t = np.array([0.0, 1.0, 17.0, 999.0], np.float32)
    torch_unet = peer.diffusers_unet(make_unet(widths=(8, 16)).get_config())
    expected = np.asarray(TimestepEmbedding(8)(t))
    actual = torch_unet.time_proj(torch.from_numpy(t)).numpy()
    np.testing.assert_allclose(actual, expected, atol=1e-5)


# The side-by-side benchmark in a process of its own, `--quick`: the Keras
# defaults and torch, each training and sampling, XLA compiles included (a
# minute on two cores). The slow tier; CI runs it with the peer extra.
@pytest.mark.slow
@pytest.mark.heavy
def test_quick_peer_reports_ratios(run, tmp_path):
    path = tmp_path / "peer.json"
    result = run("benchmark", ["--peer", "--quick", "--json", str(path)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    tiny = json.loads(path.read_text())["peer"]["tiny"]
    # The defaults (XLA or not, measured) against torch; each jit_compile
    # forced is a side of the full run alone (the test below).
    assert set(tiny["sides"]) == {"keras", "torch"}
    assert tiny["sides"]["keras"]["settings"]["jit_compile"] in (True, False)
    for kind in ("training", "sampling"):
        entry = tiny["sides"]["keras"][kind]
        assert entry["ratio"]["median"] > 0
        assert entry["peak_rss_mib"] > 0
    assert "ratio" not in tiny["sides"]["torch"]["training"]
    assert "keras/torch" in result.stdout


def test_the_full_run_forces_each_jit_compile_and_quick_does_not(benchmark_script):
    from benchmarks.config import BenchmarkConfig
    from benchmarks.peer_compare import peer_sides

    forced = ["keras-xla", "keras-graph"]
    assert peer_sides(BenchmarkConfig()) == ["keras", *forced, "torch"]
    assert peer_sides(BenchmarkConfig(quick=True)) == ["keras", "torch"]
    mixed = peer_sides(BenchmarkConfig(quick=True, peer_mixed=True))
    assert mixed == ["keras", "torch", "keras-mixed", "torch-amp"]


@pytest.mark.parametrize("hidden", ["torch", "diffusers"])
def test_peer_without_torch_says_how_to_install(benchmark_script, monkeypatch, hidden):
    # A None entry in sys.modules is what an uninstalled package looks like.
    monkeypatch.setitem(sys.modules, hidden, None)
    with pytest.raises(SystemExit) as raised:
        benchmark_script.main(["--peer", "--quick"])
    assert str(raised.value) == (
        f'--peer needs {hidden}: pip install ".[peer]" (torch and diffusers)'
    )
