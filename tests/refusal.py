"""The check of every bad_input_test.py: bad input gets a clear error.

A case is `(id, call, error, fragments)`: `call()` must raise `error`
(`ValueError` or `TypeError`) whose message contains every fragment, which
names the argument and echoes the received value. Imported as
`from tests import refusal`.
"""

import re

import numpy as np
import pytest


def params(cases):
    """`cases` as `pytest.param(call, error, fragments, id=id)`."""
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


def assert_refused(call, error, fragments):
    """`call()` raises exactly `error`, its message holding every fragment."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert isinstance(info.value, error), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for fragment in fragments:
        assert re.search(re.escape(fragment), message), (fragment, message)


def assert_refused_twice(call, error, fragments):
    """`assert_refused`, twice: a refused call changes nothing, so it is
    refused alike again."""
    for _ in range(2):
        assert_refused(call, error, fragments)


def zeros(shape, dtype="float32"):
    """The arrays the cases pass: zeros, float32 unless told."""
    return np.zeros(shape, dtype)
