"""The README and docs/ name the library's modules and objects by paths that
import: a reader who types `keras_diffusion.a.b` gets it."""

import glob
import importlib
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A dotted path of the package, as the docs write it in backticks or code.
DOTTED = re.compile(r"keras_diffusion(?:\.[A-Za-z_]\w*)+")


def _resolves(path):
    """Whether `path` is a module, or an attribute of its longest module."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_dotted_name_in_the_docs_imports():
    files = [os.path.join(ROOT, "README.md"), *glob.glob(f"{ROOT}/docs/*.md")]
    missing = set()
    for path in files:
        with open(path, encoding="utf-8") as f:
            for name in DOTTED.findall(f.read()):
                # `keras_diffusion.X`: the docs' placeholder for any public name.
                if name != "keras_diffusion.X" and not _resolves(name):
                    missing.add(f"{os.path.relpath(path, ROOT)}: {name}")
    assert not missing, sorted(missing)
