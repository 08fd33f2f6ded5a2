"""The decode-cache benchmarks (`benchmarks.cache_memory`,
`benchmarks.cache_pipeline`) on a tiny folder, in this process."""

import json

import numpy as np
import pytest
from PIL import Image

from keras_diffusion.diagnostics import VERDICTS
from tests.denoisers import conv_denoiser


@pytest.fixture
def folder(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(10):
        pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / f"{i}.png")
    return images


@pytest.mark.heavy
def test_cache_pipeline_diagnoses_a_cached_folder(folder, tmp_path):
    from benchmarks import cache_pipeline

    cache = tmp_path / "cache"
    # A few convolutions: the diagnosis traces the step twice (fit and the
    # step alone), seconds for a U-Net; the pipeline is what is measured.
    denoiser = conv_denoiser((8, 8, 3))
    result = cache_pipeline.measure(
        str(folder), str(cache), 8, 4, None, steps=2, denoiser=denoiser
    )
    assert (cache / "manifest.json").exists()  # it read a cache, built first
    assert result["verdict"] in VERDICTS
    assert result["input"] > 0 and result["step"] > 0 and result["fit"] > 0
    assert (result["size"], result["batch_size"]) == (8, 4)


def test_cache_memory_reports_memory_of_an_epoch(folder, tmp_path, capsys):
    from benchmarks import cache_memory

    cache = str(tmp_path / "cache")
    for mode in ("build", "read", "memory"):
        cache_memory._child(mode, str(folder), cache, 16, 4)
    lines = capsys.readouterr().out.strip().splitlines()
    results = [json.loads(line) for line in lines if line.startswith("{")]
    assert [r["images"] for r in results] == [0, 10, 10]
    assert all(r["RssAnon"] > 0 and r["VmHWM"] >= r["VmRSS"] for r in results)
