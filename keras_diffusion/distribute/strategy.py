"""tf.distribute strategies by name, `TF_CONFIG` checks and a scope check.

`DiffusionModel` trains under TensorFlow's own strategies the way any Keras
model does: create the strategy first, then build and compile the model inside
`strategy.scope()`, then call `fit` with the global batch size; `fit`
distributes the dataset.

```python
strategy = keras_diffusion.distribute.make_strategy("mirrored")
with strategy.scope():
    model = keras_diffusion.DiffusionModel(keras_diffusion.UNet((32, 32, 3)))
    model.compile(optimizer=keras.optimizers.Adam(2e-4))
model.fit(images, batch_size=64 * strategy.num_replicas_in_sync, epochs=10)
```

A global batch that does not divide evenly by the number of replicas is
neither dropped nor padded: tf.distribute splits it unevenly (5 images on two
replicas: 3 and 2; a last batch of 1: 1 and an empty batch). `DiffusionModel`
weights each replica's loss by its share of the global batch, so the update is
the one a single device makes for the whole batch.
"""

import json
import os

import tensorflow as tf

from keras_diffusion.utils.checks import check_choice

STRATEGY_NAMES = ("none", "mirrored", "multiworker")

_TF_CONFIG_EXAMPLE = (
    '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
    '"task": {"type": "worker", "index": 0}}'
)


def make_strategy(name="none"):
    """Returns the `tf.distribute.Strategy` called `name`.

    Args:
        name: str, one of:
            - `"none"`: the default strategy (one device; its scope is a no-op).
            - `"mirrored"`: `tf.distribute.MirroredStrategy` over all local
              GPUs (the CPU when there is none).
            - `"multiworker"`: `tf.distribute.MultiWorkerMirroredStrategy`
              over the machines listed in the `TF_CONFIG` environment
              variable, which is checked first (see `parse_tf_config`). Create
              it at the start of the program, before any other TensorFlow
              call, and run the same program on every worker.
            Defaults to `"none"`.

    Returns:
        A `tf.distribute.Strategy`.

    Example:

    ```python
    strategy = make_strategy("mirrored")
    print(strategy.num_replicas_in_sync)
    ```
    """
    check_choice("name", name, STRATEGY_NAMES)
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    parse_tf_config()
    return tf.distribute.MultiWorkerMirroredStrategy()


def parse_tf_config(text=None):
    """Parses and checks a `TF_CONFIG`, raising a clear error when it is wrong.

    Args:
        text: str, the JSON text. Defaults to the `TF_CONFIG` environment
            variable.

    Returns:
        The parsed dict: `{"cluster": {job: ["host:port", ...]},
        "task": {"type": job, "index": i}}`.
    """
    if text is None:
        text = os.environ.get("TF_CONFIG")
        if not text:
            raise ValueError(
                "The 'multiworker' strategy reads the cluster from the TF_CONFIG "
                "environment variable, which is not set. Set it on every worker, "
                f"e.g. TF_CONFIG='{_TF_CONFIG_EXAMPLE}' (index 1 on the second)."
            )
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"TF_CONFIG is not valid JSON ({error}). Expected e.g. "
            f"{_TF_CONFIG_EXAMPLE}. Received: TF_CONFIG={text!r}"
        ) from None
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object. Received: {text!r}")
    for key in ("cluster", "task"):
        if not isinstance(config.get(key), dict):
            raise ValueError(
                f"TF_CONFIG needs a {key!r} object. Expected e.g. "
                f"{_TF_CONFIG_EXAMPLE}. Received: TF_CONFIG={text!r}"
            )
    cluster, task = config["cluster"], config["task"]
    if "worker" not in cluster and "chief" not in cluster:
        raise ValueError(
            "TF_CONFIG 'cluster' needs a 'worker' list of 'host:port' addresses. "
            f"Received: cluster={cluster!r}"
        )
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ValueError(
                f"TF_CONFIG cluster job {job!r} must be a non-empty list of "
                f"'host:port' addresses. Received: {job}={addresses!r}"
            )
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not isinstance(address, str) or not host or not port.isdigit():
                raise ValueError(
                    f"TF_CONFIG cluster job {job!r} has an address that is not "
                    f"'host:port'. Received: {address!r}"
                )
    task_type, index = task.get("type"), task.get("index")
    if task_type not in cluster:
        raise ValueError(
            "TF_CONFIG 'task' needs a 'type' naming a job of the cluster "
            f"({sorted(cluster)}). Received: task={task!r}"
        )
    size = len(cluster[task_type])
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise ValueError(
            f"TF_CONFIG task index must be an int in [0, {size}) for the "
            f"{size} {task_type!r} address(es). Received: index={index!r}"
        )
    return config


def is_multi_worker(strategy):
    """Whether `strategy` spans several processes (workers)."""
    return isinstance(
        strategy, tf.distribute.MultiWorkerMirroredStrategy
    ) and strategy.num_replicas_in_sync > len(strategy.extended.worker_devices)


def check_built_in_scope(model):
    """Raises if a variable of `model` was made outside its strategy's scope.

    Keras runs `fit` under the strategy that was current when the model was
    created (or, failing that, the one current at `fit`). A denoiser, model or
    optimizer built outside that strategy's scope holds plain variables that
    the strategy cannot mirror, which fails later with an obscure error or,
    worse, trains on one replica's gradients.

    Args:
        model: a Keras model, compiled or not.
    """
    strategy = model.distribute_strategy
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        variables += list(optimizer.variables)
    extended = strategy.extended
    for variable in variables:
        value = getattr(variable, "value", variable)
        if not extended.variable_created_in_scope(value):
            name = getattr(variable, "path", getattr(variable, "name", variable))
            raise ValueError(
                f"Variable {name!r} of {model.name!r} was not created "
                f"under the scope of the {type(strategy).__name__} that `fit` runs "
                "in. Create the denoiser, the model and its optimizer (compile) "
                "inside `with strategy.scope():`, or load the saved model with "
                "`keras.saving.load_model` inside it."
            )


def replica_seed(seed):
    """This replica's stateless seed (int32, shape `(2,)`) of a step's `seed`,
    drawn once for all replicas: each replica draws its own noise and
    timesteps from one stream. `seed` itself on one replica."""
    seed = tf.cast(seed, "int32")
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        replica = tf.cast(context.replica_id_in_sync_group, "int32")
        seed = tf.random.experimental.stateless_fold_in(seed, replica)
    return seed


def batch_share(images):
    """This replica's share of the global batch of `images`, a float32
    scalar; `None` on one replica (see the module's docstring)."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return None
    local = tf.cast(tf.shape(images)[0], "float32")
    return local / context.all_reduce(tf.distribute.ReduceOp.SUM, local)


def replica_loss(share, compute):
    """This replica's loss, `compute()`; a zero on a replica whose `share`
    (`batch_share`) of the global batch is empty. A last batch smaller than
    the number of replicas leaves some replicas an empty batch: its mean is
    NaN, and TF's CPU convolutions mis-shape empty inputs."""
    if share is None:
        return compute()
    return tf.cond(share > 0, compute, lambda: tf.zeros((), "float32"))
