"""Timing pieces of a training loop, and naming what changed between traces.

Every timer here ends by reading a value from the device (the optimizer's
step counter, or the step's outputs): TensorFlow dispatches asynchronously,
so the clock must not stop before the queued work is done.
"""

import time

import keras
import numpy as np
import tensorflow as tf


def _leaves(structure):
    """(path, description) of every leaf: shape and dtype, or a Python value."""
    paths = []

    def visit(path, value):
        if isinstance(value, dict):
            for key in sorted(value):
                visit(f"{path}[{key!r}]", value[key])
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                visit(f"{path}[{index}]", item)
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype = getattr(value.dtype, "name", str(value.dtype))
            shape = tuple(None if d is None else int(d) for d in value.shape)
            paths.append((path, f"{type(value).__name__} shape={shape} {dtype}"))
        else:
            paths.append((path, f"Python {type(value).__name__} {value!r}"))

    visit("", structure)
    return paths


def describe_change(previous, current, names=None):
    """Names the arguments whose shape, dtype or Python value differ."""
    old, new = dict(_leaves(previous)), dict(_leaves(current))
    changes = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            label = path
            if names is not None and path.startswith("[") and "]" in path:
                index = int(path[1 : path.index("]")])
                if index < len(names):
                    label = names[index] + path[path.index("]") + 1 :]
            changes.append(f"{label}: {old.get(path)} -> {new.get(path)}")
    return "; ".join(changes) or "same arguments (a Python closure or global changed)"


def count_images(batch):
    """The leading dimension of a batch's first tensor."""
    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0])


def batches(data):
    """An endless iterator over `data`: a Dataset, PyDataset or iterable."""
    if isinstance(data, tf.data.Dataset):
        finite = int(data.cardinality()) != int(tf.data.INFINITE_CARDINALITY)
        yield from iter(data.repeat() if finite else data)
        return
    if isinstance(data, keras.utils.PyDataset):
        while True:
            for index in range(len(data)):
                yield data[index]
    while True:
        empty = True
        for batch in data() if callable(data) else data:
            empty = False
            yield batch
        if empty:
            raise ValueError("Argument `data` yields no batches.")


def measure_input(data, steps=20, warmup=2):
    """Images/s of the input pipeline alone, reading `steps` batches."""
    iterator = batches(data)
    for _ in range(warmup):
        next(iterator)
    images = 0
    start = time.perf_counter()
    for _ in range(steps):
        images += count_images(next(iterator))
    return images / (time.perf_counter() - start)


def snapshot(model):
    """`(variables, values)` of a model and its optimizer, to restore later."""
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        seen = {id(v) for v in variables}
        variables += [v for v in optimizer.variables if id(v) not in seen]
    return variables, [np.array(v.numpy()) for v in variables]


def restore(state):
    """Puts back the values a `snapshot` took."""
    for variable, value in zip(*state, strict=True):
        variable.assign(value)


def sync(model):
    """Waits for the model's queued steps: reading a value waits for them."""
    return int(model.optimizer.iterations.numpy())


def sync_outputs(result):
    """Waits for a step's outputs by reading each tensor among them."""
    for leaf in tf.nest.flatten(result):
        if tf.is_tensor(leaf):
            leaf.numpy()


def model_device(model):
    """The device of the model's first variable (`/CPU:0` when unknown)."""
    variables = model.trainable_variables or model.variables
    return getattr(variables[0].value, "device", "") or "/CPU:0"


def measure_step(model, batch, steps, warmup):
    """Steps/s of `train_step` on one batch on the device, `steps` a call."""
    strategy = model.distribute_strategy

    def run(batch, n):
        def body(i):
            strategy.run(model.train_step, args=(batch,))
            return (i + 1,)

        return tf.while_loop(lambda i: i < n, body, (tf.constant(0),))

    run = tf.function(run, jit_compile=bool(model.jit_compile), reduce_retracing=True)

    run(batch, tf.constant(warmup))
    sync(model)
    start = time.perf_counter()
    run(batch, tf.constant(steps))
    sync(model)
    return steps / (time.perf_counter() - start)
