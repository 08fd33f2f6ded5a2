"""Why is training slow? Input-bound, compute-bound or retracing, measured.

`diagnose(model, dataset)` times three things on the user's own model and data:

1. the input pipeline alone (images/s, no model),
2. the compiled training step alone on one batch already on the device,
3. `model.fit` end to end,

counts the traces of the training step after warm-up (and names the argument
whose shape, dtype or Python value changed), and returns a `Diagnosis` whose
verdict is `"input-bound"`, `"compute-bound"` or `"retracing"`, with fixes.
`diagnose_step` does the same for a hand-written `@tf.function` step, and
`ThroughputLogger` logs images/s per epoch during `fit` without reading any
tensor mid-epoch (so it adds no device sync).
"""

import dataclasses
import os
import time

import keras
import numpy as np
import tensorflow as tf

VERDICTS = ("input-bound", "compute-bound", "retracing")
# The pipeline must outrun the step by this factor: prefetch overlaps the two,
# but on a CPU they share the same cores.
INPUT_HEADROOM = 1.2
# Below this fraction of the step alone, `fit` loses time between steps.
OVERHEAD_FRACTION = 0.8


@dataclasses.dataclass
class Diagnosis:
    """The measurements and verdict of `diagnose` / `diagnose_step`.

    Attributes:
        verdict: `"input-bound"`, `"compute-bound"` or `"retracing"`.
        batch_size: images a step (the leading dimension of the first batch).
        input_images_per_sec: the input pipeline alone.
        step_images_per_sec: the compiled step alone on a batch on the device.
        fit_images_per_sec: training end to end (`fit` or the user's loop).
        traces_after_warmup: traces of the step during the end-to-end run.
        retrace_causes: for each such trace, the argument that changed.
        fixes: what to change, most specific first.
        environment: what TensorFlow sees, from `environment_report`.
    """

    verdict: str
    batch_size: int
    input_images_per_sec: float
    step_images_per_sec: float
    fit_images_per_sec: float
    traces_after_warmup: int
    retrace_causes: list
    fixes: list
    environment: dict

    def to_dict(self):
        return dataclasses.asdict(self)

    def summary(self):
        env = self.environment
        lines = [
            f"Verdict: {self.verdict}",
            f"  input pipeline alone : {self.input_images_per_sec:12.1f} images/s",
            f"  step alone (cached)  : {self.step_images_per_sec:12.1f} images/s",
            f"  end to end           : {self.fit_images_per_sec:12.1f} images/s",
            f"  batch size           : {self.batch_size}",
            f"  traces after warm-up : {self.traces_after_warmup}",
        ]
        lines += [f"    retrace: {cause}" for cause in self.retrace_causes]
        lines.append(
            f"  devices: {', '.join(env['devices'])}; GPU present: "
            f"{env['gpu_present']}, used: {env['gpu_used']}; "
            f"XLA: {env['jit_compile']}; dtype policy: {env['dtype_policy']}; "
            f"steps_per_execution: {env['steps_per_execution']}"
        )
        if self.fixes:
            lines.append("Fixes:")
            lines += [f"  - {fix}" for fix in self.fixes]
        return "\n".join(lines)

    __str__ = summary


def environment_report(model=None):
    """What TensorFlow sees: devices, GPU use, XLA and mixed-precision settings.

    Args:
        model: optional compiled Keras model, to report where its variables
            live and its `jit_compile`, dtype policy and `steps_per_execution`.

    Returns:
        A dict of plain Python values.
    """
    devices = [d.name for d in tf.config.list_logical_devices()]
    gpus = tf.config.list_physical_devices("GPU")
    report = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "devices": devices,
        "gpu_present": bool(gpus),
        "gpu_used": False,
        "jit_compile": None,
        "global_jit": bool(tf.config.optimizer.get_jit()),
        "tf_xla_flags": os.environ.get("TF_XLA_FLAGS", ""),
        "dtype_policy": keras.mixed_precision.global_policy().name,
        "steps_per_execution": None,
    }
    if model is not None:
        variables = model.trainable_variables or model.variables
        report["gpu_used"] = any(
            "GPU" in str(getattr(v.value, "device", "")).upper() for v in variables
        )
        report["jit_compile"] = getattr(model, "jit_compile", None)
        policy = getattr(model, "dtype_policy", None)
        report["dtype_policy"] = getattr(policy, "name", report["dtype_policy"])
        report["steps_per_execution"] = getattr(model, "steps_per_execution", None)
    return report


def pipeline_ops(dataset):
    """The op names of a `tf.data.Dataset`'s graph and of its map functions."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    graph.ParseFromString(dataset._as_serialized_graph().numpy())
    ops = [node.op for node in graph.node]
    retval = [node for node in graph.node if node.op == "_Retval"]
    last = None
    if retval and retval[0].input:
        name = retval[0].input[0].split(":")[0]
        last = next((n.op for n in graph.node if n.name == name), None)
    functions = [n.op for f in graph.library.function for n in f.node_def]
    return {"ops": ops, "last": last, "function_ops": functions}


def input_fixes(dataset, step_seconds=None):
    """Specific changes that speed up `dataset`, from the ops it is made of."""
    fixes = []
    if not isinstance(dataset, tf.data.Dataset):
        fixes.append(
            "feed a tf.data.Dataset (e.g. keras_diffusion.data.from_arrays): "
            "tf.data decodes, batches and prefetches on its own threads; a "
            "PyDataset needs workers=N (and use_multiprocessing=True for "
            "Python-heavy loading)"
        )
        return fixes
    try:
        info = pipeline_ops(dataset)
    except Exception:  # Private TF API: give the generic advice without it.
        info = {"ops": [], "last": None, "function_ops": []}
    ops, functions = info["ops"], info["function_ops"]
    if any(op in ("EagerPyFunc", "PyFunc", "PyFuncStateless") for op in functions):
        fixes.append(
            "replace tf.py_function / tf.numpy_function in map by TensorFlow "
            "ops: Python holds the GIL, so a parallel map cannot run it faster"
        )
    if not any(op.startswith("CacheDataset") for op in ops):
        fixes.append(
            "cache: add .cache() after decoding/resizing (before shuffle and "
            "random augmentation), or cache(filename) when it does not fit in RAM"
        )
    if "MapDataset" in ops:
        fixes.append(
            "parallel map: map(fn, num_parallel_calls=tf.data.AUTOTUNE), and "
            "map after batch() so that fn runs once a batch"
        )
    if info["last"] is not None and not info["last"].startswith("Prefetch"):
        fixes.append("prefetch: end the pipeline with .prefetch(tf.data.AUTOTUNE)")
    if step_seconds is None or step_seconds < 0.05:
        fixes.append(
            "larger steps_per_execution: compile(steps_per_execution=8) runs "
            "8 steps a call, so Python and callbacks run once per 8 batches"
        )
    return fixes


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


def _count_images(batch):
    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0])


def _batches(data):
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
    iterator = _batches(data)
    for _ in range(warmup):
        next(iterator)
    images = 0
    start = time.perf_counter()
    for _ in range(steps):
        images += _count_images(next(iterator))
    return images / (time.perf_counter() - start)


def _verdict(input_ips, step_ips, fit_ips, traces, fixes_for_input):
    if traces > 0:
        return "retracing", [
            "pass tensors, not Python numbers, to a tf.function (each new "
            "Python value is a new trace)",
            "give batches one static shape: batch(..., drop_remainder=True), "
            "or tf.function(reduce_retracing=True) / an input_signature with "
            "None dimensions",
        ]
    if input_ips < INPUT_HEADROOM * step_ips or (
        fit_ips < OVERHEAD_FRACTION * step_ips and input_ips < 2 * step_ips
    ):
        return "input-bound", fixes_for_input
    fixes = ["the step itself is the limit: see docs/why-slow.md"]
    if fit_ips < OVERHEAD_FRACTION * step_ips:
        fixes.insert(
            0,
            "time is lost between steps: raise steps_per_execution and keep "
            "per-batch callbacks off (verbose=2 or 0)",
        )
    return "compute-bound", fixes


def _snapshot(model):
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        seen = {id(v) for v in variables}
        variables += [v for v in optimizer.variables if id(v) not in seen]
    return variables, [np.array(v.numpy()) for v in variables]


def _sync(model):
    # Reading a value waits for the work queued on the device to finish.
    return int(model.optimizer.iterations.numpy())


def diagnose(model, dataset, steps=20, warmup=2, restore_state=True, verbose=True):
    """Measures where a compiled model's training time goes and prints a verdict.

    Args:
        model: a compiled Keras model (e.g. a `keras_diffusion.DiffusionModel`).
        dataset: what you pass to `fit`: a `tf.data.Dataset` of batches or a
            `keras.utils.PyDataset`; finite ones are repeated as needed.
        steps: int, batches timed in each measurement. Defaults to `20`.
        warmup: int, batches run first (tracing, autotuning). Defaults to `2`.
        restore_state: bool, put the model's and optimizer's variables back
            afterwards, so diagnosing does not train the model. Defaults to
            `True`.
        verbose: bool, print the summary. Defaults to `True`.

    Returns:
        A `Diagnosis`.

    Example:

    ```python
    model.compile(optimizer="adam")
    report = keras_diffusion.diagnostics.diagnose(model, dataset, steps=10)
    report.verdict  # "input-bound", "compute-bound" or "retracing"
    ```
    """
    if getattr(model, "optimizer", None) is None:
        raise ValueError(
            "Argument `model` must be compiled before diagnosing. "
            f"Received: model={model!r} without an optimizer"
        )
    for name, value in (("steps", steps), ("warmup", warmup)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"Argument `{name}` must be a positive int. Received: {name}={value!r}"
            )
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    steps = max(spe, steps - steps % spe)
    warmup = max(spe, warmup - warmup % spe)
    state = _snapshot(model) if restore_state else None

    input_ips = measure_input(dataset, steps, warmup)
    first = next(_batches(dataset))
    batch_size = _count_images(first)
    fit_data = dataset
    if isinstance(dataset, tf.data.Dataset):
        if int(dataset.cardinality()) != int(tf.data.INFINITE_CARDINALITY):
            fit_data = dataset.repeat()

    # Count traces of train_step: Python code in it runs only while tracing.
    original = model.train_step
    traces = []

    def counted_train_step(data):
        traces.append(data)
        return original(data)

    model.train_step = counted_train_step
    model.make_train_function(force=True)
    try:
        model.fit(fit_data, epochs=1, steps_per_epoch=warmup, verbose=0)
        with tf.device(_model_device(model)):
            batch = tf.nest.map_structure(tf.identity, first)
        step_ips = _measure_step(model, batch, steps, warmup) * batch_size
        traced = len(traces)
        start = time.perf_counter()
        model.fit(fit_data, epochs=1, steps_per_epoch=steps, verbose=0)
        _sync(model)
        fit_ips = steps * batch_size / (time.perf_counter() - start)
        new = traces[traced:]
        previous = traces[traced - 1] if traced else None
        causes = []
        for data in new:
            causes.append(describe_change((previous,), (data,), names=["data"]))
            previous = data
    finally:
        del model.train_step
        model.train_function = None
        if state is not None:
            for variable, value in zip(*state, strict=True):
                variable.assign(value)

    step_seconds = batch_size / step_ips
    verdict, fixes = _verdict(
        input_ips, step_ips, fit_ips, len(new), input_fixes(dataset, step_seconds)
    )
    report = Diagnosis(
        verdict=verdict,
        batch_size=batch_size,
        input_images_per_sec=input_ips,
        step_images_per_sec=step_ips,
        fit_images_per_sec=fit_ips,
        traces_after_warmup=len(new),
        retrace_causes=causes,
        fixes=fixes,
        environment=environment_report(model),
    )
    if verbose:
        print(report.summary())
    return report


def _model_device(model):
    variables = model.trainable_variables or model.variables
    return getattr(variables[0].value, "device", "") or "/CPU:0"


def _measure_step(model, batch, steps, warmup):
    """Steps/s of `train_step` on one batch on the device, `steps` a call."""
    strategy = model.distribute_strategy

    def run(batch, n):
        def body(i):
            strategy.run(model.train_step, args=(batch,))
            return (i + 1,)

        return tf.while_loop(lambda i: i < n, body, (tf.constant(0),))

    run = tf.function(run, jit_compile=bool(model.jit_compile), reduce_retracing=True)

    run(batch, tf.constant(warmup))
    _sync(model)
    start = time.perf_counter()
    run(batch, tf.constant(steps))
    _sync(model)
    return steps / (time.perf_counter() - start)


def diagnose_step(step_fn, data, steps=20, warmup=2, verbose=True):
    """`diagnose` for a hand-written loop: a `tf.function` called once a batch.

    The loop measured end to end is `for batch in data: step_fn(*batch)` (or
    `step_fn(batch)` when a batch is not a tuple), as in a custom training
    loop; the step alone repeats the call on the first batch, copied to the
    device. Each call's arguments are recorded, so a retrace names the one
    whose shape, dtype or Python value changed.

    Args:
        step_fn: a `tf.function` (it must have `experimental_get_tracing_count`).
        data: a `tf.data.Dataset`, a `keras.utils.PyDataset`, a list of
            batches, or a callable returning a fresh iterable of batches.
        steps: int, batches timed in each measurement. Defaults to `20`.
        warmup: int, batches run first. Defaults to `2`.
        verbose: bool, print the summary. Defaults to `True`.

    Returns:
        A `Diagnosis`. Note that the step is really run: it trains.
    """
    if not hasattr(step_fn, "experimental_get_tracing_count"):
        raise TypeError(
            f"Argument `step_fn` must be a tf.function. Received: step_fn={step_fn!r}"
        )

    def call(batch):
        return step_fn(*batch) if isinstance(batch, tuple) else step_fn(batch)

    def sync(result):
        for leaf in tf.nest.flatten(result):
            if tf.is_tensor(leaf):
                leaf.numpy()

    input_ips = measure_input(data, steps, warmup)
    iterator = _batches(data)
    first = next(iterator)
    batch_size = _count_images(first)

    device_batch = tf.nest.map_structure(
        lambda x: tf.identity(x) if tf.is_tensor(x) or hasattr(x, "dtype") else x,
        first,
    )
    for _ in range(warmup):
        sync(call(device_batch))
    start = time.perf_counter()
    for _ in range(steps):
        result = call(device_batch)
    sync(result)
    step_ips = steps * batch_size / (time.perf_counter() - start)

    iterator = _batches(data)
    previous = None
    for _ in range(warmup):
        previous = next(iterator)
        sync(call(previous))
    count = step_fn.experimental_get_tracing_count()
    causes, images = [], 0
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(iterator)
        result = call(batch)
        images += _count_images(batch)
        now = step_fn.experimental_get_tracing_count()
        if now > count:
            args = batch if isinstance(batch, tuple) else (batch,)
            old = previous if isinstance(previous, tuple) else (previous,)
            names = [f"argument {i}" for i in range(len(args))]
            causes.append(describe_change(old, args, names=names))
            count = now
        previous = batch
    sync(result)
    fit_ips = images / (time.perf_counter() - start)

    verdict, fixes = _verdict(
        input_ips,
        step_ips,
        fit_ips,
        len(causes),
        input_fixes(data, batch_size / step_ips),
    )
    report = Diagnosis(
        verdict=verdict,
        batch_size=batch_size,
        input_images_per_sec=input_ips,
        step_images_per_sec=step_ips,
        fit_images_per_sec=fit_ips,
        traces_after_warmup=len(causes),
        retrace_causes=causes,
        fixes=fixes,
        environment=environment_report(),
    )
    if verbose:
        print(report.summary())
    return report


class ThroughputLogger(keras.callbacks.Callback):
    """Logs images/s of each epoch of `fit`, adding no device sync.

    It reads the clock at the start and end of each epoch and counts the step
    indices `fit` reports; it never reads a tensor, so Keras can keep
    dispatching steps asynchronously. The rate is added to the epoch's logs as
    `images_per_sec` (so it lands in `History`) and printed.

    Args:
        batch_size: int, images per step (the global batch under a
            distribution strategy).
        print_fn: callable taking a str, or `None` to only log. Defaults to
            `print`.

    Example:

    ```python
    model.fit(dataset, epochs=5, callbacks=[ThroughputLogger(batch_size=64)])
    ```
    """

    # Only counts integers in on_train_batch_end: safe off the main thread.
    async_safe = True

    def __init__(self, batch_size, print_fn=print):
        super().__init__()
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise ValueError(
                "Argument `batch_size` must be a positive int. "
                f"Received: batch_size={batch_size!r}"
            )
        if batch_size < 1:
            raise ValueError(
                "Argument `batch_size` must be a positive int. "
                f"Received: batch_size={batch_size!r}"
            )
        self.batch_size = batch_size
        self.print_fn = print_fn
        self._start = None
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = 0
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index of the last step run; logs are left untouched.
        self._steps = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        # Keras has already fetched the epoch's logs, so the device is done.
        elapsed = time.perf_counter() - self._start
        rate = self._steps * self.batch_size / max(elapsed, 1e-9)
        if logs is not None:
            logs["images_per_sec"] = rate
        if self.print_fn is not None:
            self.print_fn(
                f"epoch {epoch + 1}: {rate:.1f} images/s "
                f"({self._steps} steps in {elapsed:.2f} s)"
            )
