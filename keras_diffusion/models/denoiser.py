"""How `DiffusionModel` calls and builds the denoiser a user brings.

Two call forms are accepted, told apart by the signature of the model's
`call`:

- one input list, `denoiser([x_t, t])` or `denoiser([x_t, t, labels])`: the
  form of `keras_diffusion.UNet`, of Functional and Sequential models, and of
  a subclassed model whose `call(self, inputs)` unpacks a list;
- positional inputs, `denoiser(x_t, t)` or `denoiser(x_t, t, labels)`: a
  subclassed model whose `call(self, x, t)` takes two or more required
  positional arguments, as in many tutorials.

A subclassed model is usually unbuilt until its first call: it then has no
weights for the optimizer and the EMA to track. `build` calls it once on a
zero batch, so that every weight exists before either is made.
"""

import inspect
import warnings

import keras
from keras import ops

# Keyword arguments Keras itself passes to `call`, not model inputs.
_KERAS_CALL_ARGUMENTS = ("training", "mask")


def takes_positional_inputs(denoiser):
    """Whether `denoiser.call` takes `x_t, t(, labels)` as separate arguments."""
    parameters = _call_parameters(denoiser)
    required = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
        and p.name not in _KERAS_CALL_ARGUMENTS
    ]
    return len(required) >= 2


def _call_parameters(denoiser):
    """The parameters of `denoiser.call`; empty when it has no signature."""
    try:
        return list(inspect.signature(denoiser.call).parameters.values())
    except (TypeError, ValueError):  # a builtin or C-level `call`
        return []


def call(denoiser, inputs, training=False, positional=False):
    """`denoiser(inputs)` or `denoiser(*inputs)`, by the call form."""
    if positional:
        return denoiser(*inputs, training=training)
    return denoiser(inputs, training=training)


def stateless_call(denoiser, trainable, non_trainable, inputs, positional=False):
    """The denoiser's output with the given weight values (the EMA's)."""
    args = tuple(inputs) if positional else (inputs,)
    # `stateless_call` hands its keywords to `call` as they are, unlike
    # `__call__`, which drops `training` for a `call` that lacks it.
    kwargs = {"training": False} if _accepts_training(denoiser) else {}
    outputs, _ = denoiser.stateless_call(trainable, non_trainable, *args, **kwargs)
    return outputs


def _accepts_training(denoiser):
    parameters = _call_parameters(denoiser)
    return not parameters or any(
        p.name == "training" or p.kind == p.VAR_KEYWORD for p in parameters
    )


def zero_batch(image_shape, condition=None, time_inputs=1):
    """One all-zero example: `[x_t, t]`, plus `condition` (one example of
    the denoiser's third input: label 0, or a text model's context); `t` is
    `(1,)`, or `(1, time_inputs)` for a process that gives several times."""
    t_shape = (1,) if time_inputs == 1 else (1, time_inputs)
    inputs = [ops.zeros((1,) + tuple(image_shape)), ops.zeros(t_shape, "float32")]
    if condition is not None:
        inputs.append(condition)
    return inputs


def build(denoiser, image_shape, condition=None, positional=False, time_inputs=1):
    """Builds an unbuilt denoiser by calling it once on a zero batch.

    A built denoiser (a Functional `UNet`, or a subclassed model already
    called) is left as it is. The output of the build call must have the
    input's shape: the denoiser predicts noise, velocity or x_0 of the image.

    Raises:
        ValueError: when the call fails or returns another shape; the message
            shows the call that was made, and the call's own error is chained.
    """
    given = getattr(denoiser, "time_inputs", time_inputs)
    if given != time_inputs:
        raise ValueError(
            f"The process gives the denoiser {time_inputs} time input(s) an "
            f"example, and the denoiser takes {given} "
            f"(`UNet(time_inputs={time_inputs})` fits it). Received: "
            f"denoiser={denoiser.name!r} with time_inputs={given!r}"
        )
    if denoiser.built and denoiser.weights:
        return
    inputs = zero_batch(image_shape, condition, time_inputs)
    shown = _describe_call(denoiser, inputs, positional)
    try:
        outputs = call(denoiser, inputs, training=False, positional=positional)
    except Exception as error:
        raise ValueError(
            f"Building the denoiser by calling it on a zero batch, {shown}, "
            f"failed with {type(error).__name__}: {error}. A denoiser is "
            "called as denoiser([x_t, t]) (or denoiser([x_t, t, labels]) with "
            "`num_classes`), or, when its `call` takes two or more required "
            "arguments, as denoiser(x_t, t) (or denoiser(x_t, t, labels)). "
            f"Received: denoiser={denoiser!r}, image_shape={tuple(image_shape)}"
        ) from error
    shape = tuple(getattr(outputs, "shape", ()))
    if shape != (1,) + tuple(image_shape):
        raise ValueError(
            f"The denoiser must return a prediction of the image's shape "
            f"{(1,) + tuple(image_shape)} for {shown}. Received: output of "
            f"shape {shape}"
        )


def _describe_call(denoiser, inputs, positional):
    names = ["x_t", "t", "labels" if inputs[-1].dtype == "int32" else "context"]
    names = names[: len(inputs)]
    shapes = ", ".join(
        f"{name} of shape {tuple(x.shape)}"
        for name, x in zip(names, inputs, strict=True)
    )
    form = ", ".join(names) if positional else f"[{', '.join(names)}]"
    return f"{denoiser.name}({form}) with {shapes}"


def warn_if_unregistered(denoiser):
    """Warns when `denoiser` is of a class of the user's that Keras has not
    registered: a `.keras` file holding it loads in no other process (the
    class cannot be found by name there)."""
    cls = type(denoiser)
    if cls.__module__.split(".")[0] in ("keras", "keras_diffusion"):
        return
    if ">" in keras.saving.get_registered_name(cls):
        return  # registered, as package>name
    warnings.warn(
        f"The denoiser's class {cls.__name__} (module {cls.__module__}) is not "
        "registered with Keras, so the saved file will not load in another "
        "process: decorate the class with "
        "@keras.saving.register_keras_serializable() and import its module "
        "before loading (scripts: --import MODULE).",
        UserWarning,
        stacklevel=3,
    )
