"""`compile(jit_compile="auto")`: XLA or graph mode, chosen by timing both.

Which one trains faster depends on the denoiser, not on the device: on the
2-core CPU of docs/why-slow.md ("XLA or graph mode") XLA trained the digits
U-Net 1.21x faster, the folder U-Nets 0.78-0.92x and a plain stack of
convolutions 0.60x. So the first `fit` of a model compiled with `"auto"`
measures:

1. the step in graph mode: its first call (trace and run), then its time a
   step, on one batch of the run's shape, at the steps a call that mode runs;
2. only when the run is long enough to repay XLA's compilation (its steps at
   the graph-mode time, times `XLA_GAIN_TO_REPAY`, cover
   `XLA_COMPILE_FACTOR` times the graph-mode first call), the XLA step the
   same way, then both again, alternated, keeping each one's fastest;
3. XLA is kept when its step is at least `XLA_MARGIN` faster.

A call longer than `SLOW_CALL_SECONDS` is timed once a form, not
alternated: on a large U-Net on a CPU (a 9-13 s step) the rounds cost
minutes and tell no more. A line says what is measured before each part
that can take long (the graph-mode step, XLA's compilation, with its
estimate), so the terminal is never silent for the minutes they can take.

The steps timed train on the batch; every variable they change (weights,
optimizer, EMA, random stream, metrics) is restored before `fit` starts, so
the run trains as if it had been compiled with the chosen form. One line
says what was kept and why. The choice is saved with the model
(`get_compile_config`): a reloaded model, or a second `fit`, does not measure
again. `generate` samples with the same choice.
"""

import dataclasses
import time

import keras
import numpy as np
import tensorflow as tf

# The saving XLA must bring, as a share of the graph-mode step, for the
# compilation to be worth trying: about the best measured (the digits U-Net,
# 112.7 against 93.1 ms a step, a saving of 17 %).
XLA_GAIN_TO_REPAY = 0.15
# XLA's compilation of a train step against graph mode's first call (trace
# and run) of the same step: 2.4-3.0 on the models of docs/why-slow.md ("XLA
# or graph mode"), a 2-core CPU.
XLA_COMPILE_FACTOR = 3.0
# XLA is kept only when its step is faster by more than this share: within
# it, timings of a busy machine do not tell the two apart.
XLA_MARGIN = 0.03
# Each form is timed over at least this long a stretch, and this many times.
MIN_TIMED_SECONDS = 0.3
TIMED_ROUNDS = 3
# A call at least this long is timed once a form: its noise is small
# beside it, and alternated rounds would cost minutes.
SLOW_CALL_SECONDS = 1.0


@dataclasses.dataclass
class Choice:
    """What `choose` decided and from which measurements (seconds)."""

    jit_compile: bool
    reason: str
    graph_step: float | None = None
    xla_step: float | None = None
    graph_first_call: float | None = None
    xla_first_call: float | None = None

    def summary(self):
        return f"jit_compile='auto': {self.reason}"


def _ms(seconds):
    if seconds >= 1.0:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.1f} ms"


def sample_batch(x, batch_size=None):
    """One batch of `fit`'s data, or `None` when it cannot be had cheaply.

    A batch of a `tf.data.Dataset` is made from its spec (random images,
    zero labels), so that no iterator is created: one would advance a seeded
    shuffle, and the run would train on other epoch orders than it would
    without the measurement. A batch dimension the spec leaves open (`batch`
    without `drop_remainder`) takes `batch_size`, or 32 (`fit`'s default);
    the two forms are compared on the same batch, so their ratio holds.
    """
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        if not all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(spec)):
            return None
        rng = np.random.default_rng(0)

        def made(s):
            dims = [int(batch_size or 32) if d is None else d for d in s.shape]
            dtype = s.dtype.as_numpy_dtype
            if s.dtype.is_floating:
                return rng.uniform(-1, 1, dims).astype(dtype)
            return np.zeros(dims, dtype)

        # A tuple, or a structure in it (a ControlNet's labels and controls).
        return tf.nest.map_structure(made, spec)
    if isinstance(x, keras.utils.PyDataset):
        return x[0]
    return None


class _State:
    """Every variable a train step changes, to put back after timing it."""

    def __init__(self, model):
        seen, self._variables = set(), []
        groups = [model.variables, model.optimizer.variables]
        groups += [m.variables for m in model.metrics]
        if getattr(model, "ema", None) is not None:
            groups.append(model.ema.variables)
        for group in groups:
            for v in group:
                if id(v) not in seen:
                    seen.add(id(v))
                    self._variables.append(v)
        self._values = [keras.ops.convert_to_numpy(v) for v in self._variables]

    def restore(self):
        for v, value in zip(self._variables, self._values, strict=True):
            v.assign(value)


def _repeated(batch, fixed_batch):
    """`batch` forever, with the batch dimension `fit`'s data has: the train
    function traced here is then the one `fit` calls, not traced again."""
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    if fixed_batch:
        return dataset
    size = int(tf.nest.flatten(batch)[0].shape[0])
    return dataset.unbatch().batch(size)  # the batch dimension becomes None


def has_fixed_batch(x):
    """Whether `fit`'s batches of `x` all have one size known in advance."""
    if not isinstance(x, tf.data.Dataset):
        return False
    return all(
        s.shape.rank and s.shape[0] is not None for s in tf.nest.flatten(x.element_spec)
    )


class _Form:
    """A train function in one form (XLA or not), built and timed."""

    def __init__(self, model, jit_compile, steps_per_execution, batch, fixed_batch):
        self.model, self.jit_compile = model, jit_compile
        self.steps_per_execution = steps_per_execution
        self.iterator = iter(_repeated(batch, fixed_batch))
        self.function = None
        self.first_call = None
        self.step = float("inf")

    def _call(self):
        logs = self.function(self.iterator)
        keras.ops.convert_to_numpy(logs["loss"])  # waits for the step

    def build(self):
        model = self.model
        model.jit_compile = self.jit_compile
        model.steps_per_execution = self.steps_per_execution
        model.train_function = None
        start = time.perf_counter()
        self.function = model.make_train_function()
        self._call()
        self.first_call = time.perf_counter() - start
        # An XLA step that fell back to graph mode says so here.
        self.jit_compile = bool(model.jit_compile)
        self.function = model.train_function

    def time(self):
        calls, start = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - start < MIN_TIMED_SECONDS:
            self._call()
            calls += 1
        elapsed = time.perf_counter() - start
        self.step = min(self.step, elapsed / (calls * self.steps_per_execution))

    def install(self):
        self.model.jit_compile = self.jit_compile
        self.model.steps_per_execution = self.steps_per_execution
        self.model.train_function = self.function


def silent(message):
    """A `say` that says nothing."""
    del message


def choose(model, batch, run_steps, steps_per_execution, fixed_batch=False, say=silent):
    """Times `model`'s train step with and without XLA; installs the faster.

    Args:
        model: a compiled `DiffusionModel`.
        batch: one batch of the run's data (`sample_batch`).
        run_steps: the steps the run will train, or `None` when not known
            (then taken as long enough to repay XLA).
        steps_per_execution: callable `(jit_compile, step_seconds) -> int`,
            the steps a call each form would run, given the step's time
            (`None` before one is measured; XLA's takes graph mode's).
        fixed_batch: whether `fit`'s batches have a batch dimension fixed in
            their spec (`has_fixed_batch`); else the timed function sees the
            `None` dimension `fit` will pass it.
        say: callable taking a line, told what is measured before each
            part that may take long. Defaults to saying nothing.

    Returns:
        A `Choice`. The model is left compiled with its form, its train
        function built, and every variable as it was.
    """
    state = _State(model)
    try:
        say(
            "jit_compile='auto': timing the train step in graph mode (its "
            "first call traces it), then with XLA if the run can repay XLA's "
            "compilation"
        )
        graph = _Form(
            model, False, steps_per_execution(False, None), batch, fixed_batch
        )
        graph.build()
        graph.time()
        compile_estimate = XLA_COMPILE_FACTOR * graph.first_call
        if run_steps is not None:
            saving = run_steps * graph.step * XLA_GAIN_TO_REPAY
            if saving < compile_estimate:
                graph.install()
                return Choice(
                    False,
                    f"graph mode ({_ms(graph.step)} a step): the run's {run_steps} "
                    f"steps are too few to repay XLA's compilation (about "
                    f"{compile_estimate:.0f} s)",
                    graph_step=graph.step,
                    graph_first_call=graph.first_call,
                )
        say(
            f"jit_compile='auto': graph mode takes {_ms(graph.step)} a step; "
            f"compiling the step with XLA to compare (about "
            f"{compile_estimate:.0f} s)"
        )
        xla = _Form(
            model, True, steps_per_execution(True, graph.step), batch, fixed_batch
        )
        xla.build()
        if not xla.jit_compile:
            graph.install()
            return Choice(
                False,
                "graph mode: XLA could not compile the step",
                graph_step=graph.step,
                graph_first_call=graph.first_call,
            )
        slow = graph.step * graph.steps_per_execution >= SLOW_CALL_SECONDS
        for _ in range(1 if slow else TIMED_ROUNDS):
            xla.time()
            graph.time()
        faster = xla.step < graph.step * (1.0 - XLA_MARGIN)
        winner = xla if faster else graph
        winner.install()
        ratio = graph.step / xla.step
        measured = (
            f"{_ms(xla.step)} a step with XLA, {_ms(graph.step)} in graph mode "
            f"({ratio:.2f}x; XLA compiled in {xla.first_call:.1f} s)"
        )
        return Choice(
            faster,
            ("XLA: " if faster else "graph mode: ") + measured,
            graph_step=graph.step,
            xla_step=xla.step,
            graph_first_call=graph.first_call,
            xla_first_call=xla.first_call,
        )
    finally:
        state.restore()
