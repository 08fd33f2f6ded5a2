import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from the default dtype policy and a known seed."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()
