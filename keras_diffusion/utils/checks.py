"""Argument checks shared by the package: each names the argument and the value.

Every public entry point validates its arguments before it changes any state,
and raises `TypeError` for a value of the wrong kind or `ValueError` for one out
of range, with a message of the form
``Argument `name` must be ... Received: name=value``. Internal callers trust
their callers: a value is checked once, where the user passes it.
"""

import os
import sys

import numpy as np


def is_int(value):
    """Whether `value` is a Python or NumPy integer, and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value):
    """Whether `value` is a Python or NumPy real number, and not a bool."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def check_int(name, value, minimum=None):
    """Returns `value` as an int, or raises naming the argument and the value."""
    if not is_int(value):
        raise TypeError(f"Argument `{name}` must be an int. Received: {name}={value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(
            f"Argument `{name}` must be at least {minimum}. Received: {name}={value}"
        )
    return int(value)


def check_steps_per_execution(value):
    """`"auto"`, or `value` as an int >= 1; else raises naming the argument."""
    if isinstance(value, str):
        if value == "auto":
            return value
        raise ValueError(
            "Argument `steps_per_execution` must be an int >= 1 or 'auto'. "
            f"Received: steps_per_execution={value!r}"
        )
    return check_int("steps_per_execution", value, 1)


def check_float(
    name, value, minimum=None, maximum=None, greater_than=None, less_than=None
):
    """Returns `value` as a finite float within the bounds, or raises.

    `minimum` and `maximum` are inclusive bounds, `greater_than` and
    `less_than` exclusive ones: `check_float("ema_decay", d, 0.0, less_than=1.0)`
    accepts d in [0, 1).
    """
    if not is_number(value):
        raise TypeError(
            f"Argument `{name}` must be a float. Received: {name}={value!r}"
        )
    bounds = (
        ("at least", minimum, lambda bound: value >= bound),
        ("greater than", greater_than, lambda bound: value > bound),
        ("at most", maximum, lambda bound: value <= bound),
        ("less than", less_than, lambda bound: value < bound),
    )
    bounds = [(text, bound, ok) for text, bound, ok in bounds if bound is not None]
    if not np.isfinite(value) or not all(ok(bound) for _, bound, ok in bounds):
        words = "".join(f" and {text} {bound}" for text, bound, _ in bounds)
        raise ValueError(
            f"Argument `{name}` must be finite{words}. Received: {name}={value}"
        )
    return float(value)


def check_seed(seed):
    """Returns `seed` as an int or None, or raises `TypeError`."""
    if seed is not None and not is_int(seed):
        raise TypeError(
            f"Argument `seed` must be an int or None. Received: seed={seed!r}"
        )
    return None if seed is None else int(seed)


def check_bool(name, value):
    """Returns `value` if it is a bool, or raises naming the argument."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Argument `{name}` must be a bool. Received: {name}={value!r}")
    return bool(value)


def check_choice(name, value, choices):
    """Returns `value` if it is one of `choices`, or raises naming the argument."""
    if not isinstance(value, (str, type(None))) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(
            f"Argument `{name}` must be one of {options}. Received: {name}={value!r}"
        )
    return value


def check_keras_backend():
    """Raises `ImportError` unless Keras runs, or will run, on TensorFlow.

    Called before the package imports Keras: under another backend, importing
    Keras may itself fail on a missing package (numpy's backend imports jax).
    """
    keras = sys.modules.get("keras")
    name = None if keras is None else keras.backend.backend()
    name = name or os.environ.get("KERAS_BACKEND")
    if not name:  # Keras reads ~/.keras/keras.json, defaulting to TensorFlow.
        import keras

        name = keras.backend.backend()
    if name != "tensorflow":
        raise ImportError(
            "keras_diffusion needs the TensorFlow backend of Keras: its train "
            "step, random seeds and sampling loops are TensorFlow code. Set "
            "KERAS_BACKEND=tensorflow before Keras is imported. "
            f"Received: KERAS_BACKEND={name!r}"
        )
