"""XLA for the compiled step and the sampling loop: when, and what if it fails.

Keras' `jit_compile="auto"` turns XLA off wherever TensorFlow sees no GPU.
For a diffusion U-Net the step is hundreds of small ops (GroupNorm, SiLU,
the embedding shifts, Adam and the EMA for every variable), which XLA fuses;
`DiffusionModel` therefore resolves `"auto"` to XLA on every device
(docs/benchmarks.md has the measurements), except under a `tf.distribute`
strategy, where Keras keeps it off too.

A denoiser may hold an op XLA cannot compile (a `tf.numpy_function`, say).
Then the first call of a function compiled with XLA fails, and
`with_xla_fallback` warns once, rebuilds the function without XLA and
carries on, so a default `compile()` never breaks a model that worked
without it.
"""

import functools
import warnings

import tensorflow as tf

# What TensorFlow raises when XLA cannot compile a graph; the message tells it
# apart from the same error types raised by the model itself.
_XLA_ERRORS = (
    tf.errors.InvalidArgumentError,
    tf.errors.UnimplementedError,
    tf.errors.InternalError,
)
_XLA_MESSAGES = ("XLA", "compile-time constant", "jit_compile")


def resolve_jit_compile(jit_compile):
    """`DiffusionModel.compile`'s `jit_compile`: `"auto"` becomes a bool.

    Args:
        jit_compile: bool or `"auto"`.
    """
    if jit_compile != "auto":
        return jit_compile
    # Keras also keeps XLA off under a strategy (its collectives and XLA's
    # clustering do not mix on every device).
    return not tf.distribute.has_strategy()


def is_xla_compile_error(error):
    """Whether `error` says XLA could not compile a graph."""
    return isinstance(error, _XLA_ERRORS) and any(
        text in str(error) for text in _XLA_MESSAGES
    )


def warn_fallback(what, error):
    first_line = next(
        (line for line in str(error).splitlines() if "XLA" in line),
        str(error).splitlines()[0] if str(error) else "",
    )
    warnings.warn(
        f"XLA could not compile {what}, which now runs without XLA "
        f"(jit_compile=False): {first_line.strip()[:300]}",
        stacklevel=3,
    )


def call_with_fallback(call, fall_back, what):
    """`call()`; when XLA cannot compile it, a warning and `fall_back()`.

    Args:
        call: callable running a function compiled with XLA.
        fall_back: callable running the same work without XLA.
        what: str, names the function in the warning.
    """
    try:
        return call()
    except _XLA_ERRORS as error:
        if not is_xla_compile_error(error):
            raise
        warn_fallback(what, error)
        return fall_back()


def with_xla_fallback(model, function, rebuild, what):
    """Wraps a Keras train or test function so that an XLA failure falls back.

    Args:
        model: the compiled model; its `jit_compile` becomes `False` on a
            fallback.
        function: the function Keras built, called with an iterator.
        rebuild: callable `() -> function`, building the function again (with
            `model.jit_compile` now `False`).
        what: str, names the function in the warning.

    Returns:
        `function` itself when it does not use XLA, else a wrapper that calls
        it and, when its first call fails to compile, calls the rebuilt one.
        A failed first call may have taken one batch from the iterator.
    """
    if not model.jit_compile or model.run_eagerly:
        return function
    compiled = False

    @functools.wraps(function)
    def call(iterator):
        nonlocal compiled
        if compiled:
            return function(iterator)

        def fall_back():
            model.jit_compile = False
            return rebuild()(iterator)

        outputs = call_with_fallback(lambda: function(iterator), fall_back, what)
        # False after a fallback: Keras then calls the rebuilt function.
        compiled = model.jit_compile
        return outputs

    return call
