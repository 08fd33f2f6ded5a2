"""`diagnose` (a compiled model and its data) and `diagnose_step` (a loop)."""

import time

import tensorflow as tf

from keras_diffusion.diagnostics import measure
from keras_diffusion.diagnostics.report import environment_report, make_diagnosis
from keras_diffusion.trainers import fit_input
from keras_diffusion.utils.checks import check_int


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
    steps = check_int("steps", steps, 1)
    warmup = check_int("warmup", warmup, 1)
    if hasattr(model, "resolve_steps_per_execution"):
        # What `fit` would pick for "auto", fixed now: a change between the
        # warm-up and the timed `fit` would rebuild the step and read as a
        # retrace.
        model.resolve_steps_per_execution(None)
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    steps = max(spe, steps - steps % spe)
    warmup = max(spe, warmup - warmup % spe)
    state = measure.snapshot(model) if restore_state else None
    if isinstance(dataset, tf.data.Dataset):
        # A text model's captions as `fit` makes them, token ids: the step
        # timed alone is given the batch itself (strings abort XLA).
        dataset = fit_input.with_tokens(model, dataset)

    input_ips = measure.measure_input(dataset, steps, warmup)
    first = next(measure.batches(dataset))
    batch_size = measure.count_images(first)
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
        with tf.device(measure.model_device(model)):
            batch = tf.nest.map_structure(tf.identity, first)
        step_ips = measure.measure_step(model, batch, steps, warmup) * batch_size
        traced = len(traces)
        start = time.perf_counter()
        model.fit(fit_data, epochs=1, steps_per_epoch=steps, verbose=0)
        measure.sync(model)
        fit_ips = steps * batch_size / (time.perf_counter() - start)
        new = traces[traced:]
        previous = traces[traced - 1] if traced else None
        causes = []
        for data in new:
            causes.append(measure.describe_change((previous,), (data,), ["data"]))
            previous = data
    finally:
        del model.train_step
        model.train_function = None
        if state is not None:
            measure.restore(state)

    return make_diagnosis(
        dataset,
        batch_size,
        input_ips,
        step_ips,
        fit_ips,
        causes,
        environment_report(model),
        verbose,
    )


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

    input_ips = measure.measure_input(data, steps, warmup)
    first = next(measure.batches(data))
    batch_size = measure.count_images(first)

    device_batch = tf.nest.map_structure(
        lambda x: tf.identity(x) if tf.is_tensor(x) or hasattr(x, "dtype") else x,
        first,
    )
    for _ in range(warmup):
        measure.sync_outputs(call(device_batch))
    start = time.perf_counter()
    for _ in range(steps):
        result = call(device_batch)
    measure.sync_outputs(result)
    step_ips = steps * batch_size / (time.perf_counter() - start)

    iterator = measure.batches(data)
    previous = None
    for _ in range(warmup):
        previous = next(iterator)
        measure.sync_outputs(call(previous))
    count = step_fn.experimental_get_tracing_count()
    causes, images = [], 0
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(iterator)
        result = call(batch)
        images += measure.count_images(batch)
        now = step_fn.experimental_get_tracing_count()
        if now > count:
            args = batch if isinstance(batch, tuple) else (batch,)
            old = previous if isinstance(previous, tuple) else (previous,)
            names = [f"argument {i}" for i in range(len(args))]
            causes.append(measure.describe_change(old, args, names=names))
            count = now
        previous = batch
    measure.sync_outputs(result)
    fit_ips = images / (time.perf_counter() - start)

    return make_diagnosis(
        data,
        batch_size,
        input_ips,
        step_ips,
        fit_ips,
        causes,
        environment_report(),
        verbose,
    )
