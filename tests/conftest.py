import importlib
import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests.denoisers import tiny_unet  # noqa: E402


def pytest_sessionstart(session):
    """Optional packages CI must have: `KERAS_DIFFUSION_REQUIRE=torch,diffusers`.

    The parity tests skip without torch and diffusers; a CI stage that
    installs them sets this so that a failed install fails the run instead of
    skipping them in silence. Each package is imported, not only found: one
    that is installed but fails to import would skip the tests too.
    """
    required = os.environ.get("KERAS_DIFFUSION_REQUIRE", "")
    failures = []
    for name in filter(None, (n.strip() for n in required.split(","))):
        try:
            importlib.import_module(name)
        except Exception as error:  # any failure to import skips the tests
            failures.append(f"{name} ({type(error).__name__}: {error})")
    if failures:
        raise pytest.UsageError(
            "KERAS_DIFFUSION_REQUIRE names packages that do not import: "
            + "; ".join(failures)
        )


def pytest_collection_modifyitems(config, items):
    """Tests marked `heavy` (the suite's longest) run first, the rest after
    them in collection order.

    `pytest -n 2 --dist loadgroup` hands out files in the order of their
    first test (`pytest_xdist_make_scheduler` below); a long file handed out
    last would keep one worker busy while the other, done, waits. First,
    the files of the heavy tests share the workers with the many short files
    after them. A stable sort of the one collection: every worker gets the
    same order, as xdist requires.
    """
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (the README's command) hands out whole files, and
    the tests of one `xdist_group` together, in collection order.

    xdist's own loadgroup hands each ungrouped test out alone, so the tests
    of one file alternate between the workers and each worker builds the
    file's module fixtures. Here a work unit is a file, or a group: the
    tests that share a session fixture (the trained digits run of
    tests/scripts/conftest.py) carry one `xdist_group` and run on one
    worker, which builds it once. The units keep the order of the
    collection (heavy files first, below), each worker taking the next as
    it runs out.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class FilesAndGroups(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return nodeid.split("::", 1)[0] if scope == nodeid else scope

    config.option.loadscopereorder = False
    return FilesAndGroups(config, log)


@pytest.fixture(autouse=True)
def _auto_is_graph_mode(request, monkeypatch):
    """`jit_compile="auto"` means graph mode here, except in tests marked `xla`.

    The library's default compiles the training step both ways on the first
    `fit` and samples with XLA; each XLA compile of even a tiny U-Net takes
    seconds on a CPU, which doubled the time of tests that are about
    something else (measured: 246 s -> 136 s on four sampling test files).
    The XLA paths stay covered: tests marked `xla` keep the real "auto",
    `jit_compile=True` is untouched, and the scripts' tests run the library
    in their own processes, defaults and all.
    """
    if request.node.get_closest_marker("xla"):
        return
    from keras_diffusion.trainers import xla

    real = xla.resolve_jit_compile
    monkeypatch.setattr(
        xla,
        "resolve_jit_compile",
        lambda jit_compile: False if jit_compile == "auto" else real(jit_compile),
    )


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from the default dtype policy and a known seed."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session(free_memory=False)


@pytest.fixture
def make_unet():
    """Factory of tiny U-Nets (8x8 images, a few thousand parameters):
    `tests.denoisers.tiny_unet`."""
    return tiny_unet


@pytest.fixture
def toy_images():
    """Blobs at a few positions in [-1, 1], NHWC float32, 64 x 8 x 8 x 1."""
    return make_toy_images()


def make_toy_images():
    """`toy_images`, for module fixtures (a model trained once per file)."""
    import numpy as np

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:8, :8]
    centers = rng.integers(2, 6, size=(64, 2))
    blobs = np.exp(
        -(
            (yy[None] - centers[:, :1, None]) ** 2
            + (xx[None] - centers[:, 1:, None]) ** 2
        )
        / 3.0
    )
    return (blobs * 2.0 - 1.0)[..., None].astype("float32")


def load_script(name):
    """Imports `scripts/<name>.py` as a module, to call its `main` in-process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        f"_script_{name}", os.path.join(root, "scripts", f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def train_script():
    return load_script("train")


@pytest.fixture
def sample_script():
    return load_script("sample")


@pytest.fixture
def evaluate_script():
    return load_script("evaluate")


@pytest.fixture(scope="module")
def benchmark_script():
    """scripts/benchmark.py, which also puts benchmarks/ on the import path."""
    return load_script("benchmark")
