"""Runs a benchmark worker in a process of its own and reads its result."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_worker(module, *args):
    """`python -m module args` from the checkout; its last line, as JSON."""
    env = dict(
        os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    process = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if process.returncode:
        raise RuntimeError(
            f"The worker {module} {' '.join(args)} failed (exit "
            f"{process.returncode}):\n" + process.stderr[-3000:]
        )
    return json.loads(process.stdout.strip().splitlines()[-1])
