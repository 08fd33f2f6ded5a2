"""KERAS_DIFFUSION_REQUIRE (tests/conftest.py) fails the run when a required
package does not import, so CI never skips the parity tests in silence."""

import os
import subprocess
import sys

import pytest

from tests import conftest

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


# A pytest run of its own: the hook stops the run, not only raises.
def test_an_installed_package_that_fails_to_import_fails_the_run(tmp_path):
    result = _collect(tmp_path, "numpy, broken_peer")
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "do not import: broken_peer (ImportError: no shared library)" in out


# The same hook in this process (this run's start passed through it too):
# packages that import let the run start.
def test_packages_that_import_pass(monkeypatch):
    monkeypatch.setenv("KERAS_DIFFUSION_REQUIRE", "numpy, keras,")
    assert conftest.pytest_sessionstart(session=None) is None
    monkeypatch.setenv("KERAS_DIFFUSION_REQUIRE", "numpy, no_such_package_here")
    with pytest.raises(pytest.UsageError, match="no_such_package_here"):
        conftest.pytest_sessionstart(session=None)
