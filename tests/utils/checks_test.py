"""keras_diffusion.utils.checks: bounds, error types and the backend check."""

import os
import subprocess
import sys

import numpy as np
import pytest

from keras_diffusion.utils.checks import check_float, check_int

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "value, bounds, ok",
    [
        (0.0, {"minimum": 0.0, "less_than": 1.0}, True),
        (1.0, {"minimum": 0.0, "less_than": 1.0}, False),
        (0.0, {"greater_than": 0.0}, False),
        (1e-9, {"greater_than": 0.0}, True),
        (1.0, {"maximum": 1.0}, True),
        (np.float32(0.5), {"greater_than": 0.0, "less_than": 1.0}, True),
        (float("inf"), {}, False),
    ],
)
def test_check_float_bounds(value, bounds, ok):
    if ok:
        assert check_float("x", value, **bounds) == float(value)
    else:
        with pytest.raises(ValueError, match=f"Received: x={value}"):
            check_float("x", value, **bounds)


def test_a_value_of_the_wrong_kind_is_a_type_error():
    for check, value in ((check_int, "3"), (check_int, 3.0), (check_float, "0.5")):
        with pytest.raises(TypeError, match="Received: x="):
            check("x", value)
    with pytest.raises(ValueError, match="at least 1. Received: x=0"):
        check_int("x", 0, 1)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_import_under_another_backend_says_it_needs_tensorflow(backend):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", "import keras_diffusion"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: keras_diffusion needs the TensorFlow")
    assert f"KERAS_BACKEND={backend!r}" in last_line
