"""Argument checks shared by the package: each names the argument and the value.

Every public entry point validates its arguments before it changes any state,
and raises `TypeError` for a value of the wrong kind or `ValueError` for one out
of range, with a message of the form
``Argument `name` must be ... Received: name=value``. (`check_positive_int`
keeps the `ValueError` for any bad value that the UNet and callbacks raise.)
"""

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


def check_float(name, value, minimum=None, maximum=None):
    """Returns `value` as a finite float in [minimum, maximum], or raises."""
    if not is_number(value):
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


def check_positive_int(name, value, unit=""):
    """Returns `value` if it is a Python int >= 1, else raises `ValueError`.

    For sizes stored in a config (layer widths, epochs): a NumPy integer or a
    value of another kind is refused with a `ValueError` too.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"Argument `{name}` must be a positive int{unit}. "
            f"Received: {name}={value!r}"
        )
    return value


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
