"""`DiffusionModel`'s `compile` and `fit`: what runs before Keras trains.

`Trainer` is a mixin of `keras.Model` (as Keras' own `Trainer`), whose
state is one public object the model holds, `trainer_state` (a
`TrainerState`): what `compile` chose and `fit` resolves. It reads nothing
else of the model but Keras' own attributes; the model checks its data in
its own `fit`, then calls this one.

- `compile`: the library's defaults (`jit_compile="auto"`,
  `steps_per_execution="auto"`) and no `loss` (the model defines its own);
- `fit`: the data checked and prepared (`fit_input`: tf.data's autotuning off
  where the user has not chosen), XLA or graph mode measured on the first
  `fit` (`jit_choice`), the steps a compiled call chosen
  (`execution`), and every train function wrapped so that a step XLA cannot
  compile falls back to graph mode (`xla`).
"""

import functools

import keras
import tensorflow as tf

from keras_diffusion.distribute import strategy as distribute
from keras_diffusion.trainers import execution, fit_input, jit_choice, xla
from keras_diffusion.utils.checks import check_int, check_steps_per_execution


class TrainerState:
    """What `compile` chose, for `fit` and the tools to read.

    Attributes:
        auto_steps_per_execution: bool, `compile(steps_per_execution="auto")`:
            `fit` chooses the steps a call (`execution`).
        measure_jit: bool, `compile(jit_compile="auto")` where XLA may run:
            the first `fit` times both forms (`jit_choice`).
        jit_choice: what that measurement chose (bool), or `None` before it.
        step_seconds: the graph-mode step time that measurement took
            (float), which sizes `"auto"`'s calls of either form, or `None`
            where nothing was measured in this process.
    """

    def __init__(self):
        self.auto_steps_per_execution = False
        self.measure_jit = False
        self.jit_choice = None
        self.step_seconds = None


class Trainer:
    """`compile`, `fit` and the train functions of a `DiffusionModel`, on its
    `trainer_state` (a `TrainerState` the model makes)."""

    def compile(
        self,
        optimizer="adam",
        loss=None,
        jit_compile="auto",
        steps_per_execution="auto",
        **kwargs,
    ):
        """Configures training as `keras.Model.compile` does, but for the loss.

        `jit_compile="auto"` (the default) decides on the first `fit` by
        timing the step with XLA and in graph mode, on any device, and keeps
        the faster; a run too short to repay XLA's compilation keeps graph
        mode without compiling it (`keras_diffusion.trainers.jit_choice`; one
        line says what was kept). The choice is saved with the model; before
        it, `generate` uses XLA. Under a `tf.distribute` strategy XLA stays
        off, as in Keras, and nothing is measured. An op XLA cannot compile
        makes the step fall back to plain graph mode with a warning
        (`keras_diffusion.trainers.xla`). `generate` follows the same choice.

        `steps_per_execution="auto"` (the default) runs 8 steps in each
        compiled call with XLA or on a GPU, so short steps do not each pay
        `fit`'s Python work between calls; 1 in graph mode on a CPU, where
        that measured no faster, and when a callback passed to `fit` needs
        its batch hooks every step; a divisor of `steps_per_epoch` when one
        is given (see `keras_diffusion.trainers.execution`).
        """
        if loss is not None:
            raise ValueError(
                "DiffusionModel's loss is its schedule's objective "
                "(`schedule.training_loss`: a NoiseSchedule's prediction_type "
                f"and loss_weighting); do not pass `loss`. Received: loss={loss!r}"
            )
        if jit_compile not in (True, False, "auto"):
            raise ValueError(
                "Argument `jit_compile` must be True, False or 'auto'. "
                f"Received: jit_compile={jit_compile!r}"
            )
        auto_steps = check_steps_per_execution(steps_per_execution) == "auto"
        if kwargs.get("run_eagerly"):
            jit_compile = False
        measure = jit_compile == "auto" and xla.resolve_jit_compile("auto")
        jit_compile = xla.resolve_jit_compile(jit_compile)
        state = self.trainer_state
        if measure and state.jit_choice is not None:
            jit_compile = state.jit_choice
        super().compile(
            optimizer=optimizer,
            jit_compile=jit_compile,
            steps_per_execution=1 if auto_steps else steps_per_execution,
            **kwargs,
        )
        state.auto_steps_per_execution = auto_steps
        # XLA or not is measured on the first `fit` (`jit_choice`), and kept.
        state.measure_jit = measure
        # Slots exist from the start, so a model saved before training loads
        # its optimizer without a variable-count mismatch.
        self.optimizer.build(self.trainable_variables)

    @property
    def jit_choice(self):
        """What `compile(jit_compile="auto")` chose (bool), or `None` before
        the first `fit` measured, or when the model was compiled otherwise."""
        state = self.trainer_state
        return state.jit_choice if state.measure_jit else None

    def set_jit_choice(self, jit_compile):
        """Trains with `jit_compile` as if `"auto"` had measured it (a resumed
        run takes the choice of the run it continues); nothing happens on a
        model compiled with `jit_compile=True`/`False`."""
        if not self.trainer_state.measure_jit:
            return
        self.trainer_state.jit_choice = bool(jit_compile)
        self.jit_compile = bool(jit_compile)
        self.train_function = None  # made again, in the chosen form

    def get_compile_config(self):
        config = super().get_compile_config()
        state = self.trainer_state
        if config and state.auto_steps_per_execution:
            # Saved with the model, so that a loaded one stays "auto".
            config["steps_per_execution"] = "auto"
        if config and state.measure_jit:
            # The measured choice, so that a loaded model does not measure.
            config["jit_compile"] = "auto"
            config["jit_choice"] = state.jit_choice
        return config

    def compile_from_config(self, config):
        config = keras.saving.deserialize_keras_object(config)
        config.pop("loss", None)
        choice = config.pop("jit_choice", None)
        if choice is not None:
            self.trainer_state.jit_choice = bool(choice)
        self.compile(**config)

    def fit(self, x=None, y=None, **kwargs):
        distribute.check_built_in_scope(self)
        # tf.data's autotuning off where the user has not chosen: it made a
        # third to a half of all epochs 1.8x as long on a small CPU.
        x, y, kwargs = fit_input.prepare(self, x, y, kwargs)
        if isinstance(x, (tf.data.Dataset, tf.distribute.DistributedDataset)):
            # A tf.data pipeline shuffles itself; Keras would only warn that
            # fit's default `shuffle=True` is ignored.
            kwargs.setdefault("shuffle", False)
        steps = execution.epoch_steps(
            x,
            kwargs.get("batch_size"),
            kwargs.get("steps_per_epoch"),
            kwargs.get("validation_split", 0.0),
        )
        state = self.trainer_state
        if state.measure_jit and state.jit_choice is None:
            epochs = int(kwargs.get("epochs", 1)) - int(kwargs.get("initial_epoch", 0))
            self.measure_jit_compile(
                x if y is None else (x, y),
                run_steps=None if steps is None else steps * max(epochs, 1),
                epoch_steps=steps,
                callbacks=kwargs.get("callbacks"),
                verbose=kwargs.get("verbose", "auto"),
                batch_size=kwargs.get("batch_size"),
            )
        self.resolve_steps_per_execution(steps, kwargs.get("callbacks"))
        return super().fit(x, y, **kwargs)

    def evaluate(self, x=None, y=None, **kwargs):
        # A text model's captions become token ids in the input pipeline.
        x, y, kwargs = fit_input.prepare_evaluation(self, x, y, kwargs)
        return super().evaluate(x, y, **kwargs)

    def measure_jit_compile(
        self,
        data,
        run_steps=None,
        epoch_steps=None,
        callbacks=None,
        verbose="auto",
        batch_size=None,
    ):
        """Chooses XLA or graph mode now, as the first `fit` would.

        What `compile(jit_compile="auto")` does on the first `fit`
        (`keras_diffusion.trainers.jit_choice`), for a run of `run_steps`
        steps (`None`: long enough to repay XLA). For a caller that splits
        a run into several `fit` calls (a resume in the middle of an
        epoch), or measures before training. Nothing happens on a model
        compiled with `jit_compile=True`/`False`, under a strategy, or once
        the choice is made.

        Args:
            data: the training data, as `fit` takes `x` (arrays as `(x, y)`).
            run_steps: int or `None`, the steps the run will train.
            epoch_steps: int or `None`, the steps of an epoch (for the steps
                a compiled call each form would run).
            callbacks: `fit`'s callbacks, or `None`.
            verbose: 0 for no line.
            batch_size: for arrays, `fit`'s batch size (32 when `None`).

        Returns:
            bool, the `jit_compile` the model trains with.
        """
        for name, value in (("run_steps", run_steps), ("epoch_steps", epoch_steps)):
            if value is not None:
                check_int(name, value, minimum=1)
        state = self.trainer_state
        if not state.measure_jit or state.jit_choice is not None:
            return bool(self.jit_compile)
        batch = jit_choice.sample_batch(data, batch_size)
        if batch is None:
            size = int(batch_size or 32)
            # Arrays, or a structure of them (a ControlNet's dict of
            # labels and controls).
            batch = keras.tree.map_structure(lambda a: a[:size], data)
        gpu = bool(tf.config.list_logical_devices("GPU"))
        say = (
            jit_choice.silent if verbose == 0 else functools.partial(print, flush=True)
        )

        def steps_per_execution(jit_compile, step_seconds):
            if not state.auto_steps_per_execution:
                return self.steps_per_execution
            return execution.auto_steps_per_execution(
                epoch_steps,
                callbacks,
                xla=jit_compile,
                gpu=gpu,
                step_seconds=step_seconds,
            )

        choice = jit_choice.choose(
            self,
            batch,
            run_steps,
            steps_per_execution,
            jit_choice.has_fixed_batch(data),
            say=say,
        )
        state.jit_choice = choice.jit_compile
        state.step_seconds = choice.graph_step
        say(choice.summary())
        return choice.jit_compile

    def resolve_steps_per_execution(self, epoch_steps, callbacks=None):
        """Sets `steps_per_execution` for `compile`'s "auto" before a `fit`
        of `epoch_steps` steps an epoch (`None`: not known), with its
        `callbacks` (`keras_diffusion.trainers.execution`); nothing on a
        model compiled with a number. A change rebuilds, and recompiles, the
        step; otherwise it is kept across `fit` calls."""
        if not self.trainer_state.auto_steps_per_execution:
            return
        steps = execution.auto_steps_per_execution(
            epoch_steps,
            callbacks,
            xla=bool(self.jit_compile),
            gpu=bool(tf.config.list_logical_devices("GPU")),
            step_seconds=self.trainer_state.step_seconds,
        )
        if steps != self.steps_per_execution:
            self.steps_per_execution = steps
            self.train_function = None

    def make_train_function(self, force=False):
        return self._make_with_fallback("train", force)

    def make_test_function(self, force=False):
        return self._make_with_fallback("test", force)

    def _make_with_fallback(self, kind, force):
        attribute = f"{kind}_function"
        if getattr(self, attribute) is not None and not force:
            return getattr(self, attribute)
        make = getattr(super(), f"make_{kind}_function")

        def rebuild():
            make(force=True)
            return getattr(self, attribute)

        function = xla.with_xla_fallback(self, rebuild(), rebuild, f"the {kind} step")
        setattr(self, attribute, function)
        return function
