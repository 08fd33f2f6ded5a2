"""Argument checks shared by the package: each names the argument and the value.

Every public entry point validates its arguments before it changes any state,
and raises `TypeError` for a value of the wrong kind or `ValueError` for one out
of range, with a message of the form
``Argument `name` must be ... Received: name=value``.
"""

import numpy as np


def check_int(name, value, minimum=None):
    """Returns `value` as an int, or raises naming the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Argument `{name}` must be an int. Received: {name}={value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(
            f"Argument `{name}` must be at least {minimum}. Received: {name}={value}"
        )
    return int(value)


def check_float(name, value, minimum=None, maximum=None):
    """Returns `value` as a finite float in [minimum, maximum], or raises."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(
            f"Argument `{name}` must be a float. Received: {name}={value!r}"
        )
    too_low = minimum is not None and value < minimum
    too_high = maximum is not None and value > maximum
    if not np.isfinite(value) or too_low or too_high:
        bounds = "".join(
            text
            for text, bound in (
                (f" and at least {minimum}", minimum),
                (f" and at most {maximum}", maximum),
            )
            if bound is not None
        )
        raise ValueError(
            f"Argument `{name}` must be finite{bounds}. Received: {name}={value}"
        )
    return float(value)


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
