"""KERAS_DIFFUSION_REQUIRE (tests/conftest.py) fails the run when a required
package does not import, so CI never skips the parity tests in silence."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collect(tmp_path, required):
    broken = tmp_path / "broken_peer"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('no shared library')\n")
    env = {
        **os.environ,
        "KERAS_DIFFUSION_REQUIRE": required,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT]),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "tests/utils/stateless_test.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_an_installed_package_that_fails_to_import_fails_the_run(tmp_path):
    result = _collect(tmp_path, "numpy, broken_peer")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "do not import: broken_peer (ImportError: no shared library)" in out


def test_packages_that_import_pass(tmp_path):
    result = _collect(tmp_path, "numpy")
    assert result.returncode == 0, result.stdout + result.stderr
