"""The verdict of a diagnosis, the fixes it suggests, and `Diagnosis` itself."""

import dataclasses
import os

import keras
import tensorflow as tf

from keras_diffusion.utils import keras_internals

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
    graph = keras_internals.dataset_graph_def(dataset)
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


def make_diagnosis(
    data, batch_size, input_ips, step_ips, fit_ips, causes, environment, verbose
):
    """The `Diagnosis` of three measured rates; prints it when `verbose`.

    Args:
        data: the data measured, to suggest input fixes for.
        batch_size: int, images a step.
        input_ips: images/s of the input pipeline alone.
        step_ips: images/s of the step alone.
        fit_ips: images/s end to end.
        causes: list of str, one a retrace after warm-up.
        environment: dict from `environment_report`.
        verbose: bool, print the summary.
    """
    fixes_for_input = input_fixes(data, batch_size / step_ips)
    verdict, fixes = _verdict(
        input_ips, step_ips, fit_ips, len(causes), fixes_for_input
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
        environment=environment,
    )
    if verbose:
        print(report.summary())
    return report
