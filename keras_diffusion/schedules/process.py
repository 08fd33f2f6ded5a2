"""The process protocol: the questions every forward process answers.

A process is the forward process and its objective: how training draws the
noise level and noises x0, what the network is given, its target and loss
weight, how a network output becomes the x0 and eps estimates the samplers
step with, which samplers apply, its default sampler, and its settings in a
training run. `NoiseSchedule` (variance preserving, with a prediction type),
`EDMSchedule`, `FlowMatchSchedule` and `ConsistencySchedule` are processes;
so is any class that subclasses `Process` and answers the same questions
(docs/architecture.md, "Adding a process"). `DiffusionModel`, the samplers,
`interop/`, `run/`, `diagnostics/` and `evaluation/` ask the process and
never test its type.

The samplers meet a process through its `sampler_family`, the kind of state
they step on (k-diffusion's cut):

- `"vp"`: the discrete variance-preserving x_t = sqrt(abar_t) x0 +
  sqrt(1 - abar_t) eps over `alphas_cumprod` (DDPM, DDIM, DPM-Solver, Euler,
  Heun, RePaint, as diffusers' schedulers of those names);
- `"sigma"`: x = x0 + sigma n over the process's `sigmas(num_steps)` (and
  `sigma_min`), its starting scale `init_sigma` and its denoiser D = c_skip
  x + c_out F (`preconditioning(sigma, xp)`, see `sigma_tables`);
- `"flow"`: x = (1 - s) x0 + s n over `sigmas(num_steps)` (and
  `dpm_sigmas(num_steps)`), the network returning the velocity;
- `"consistency"`: the same state, the network's output giving a clean
  sample from any level in one call (`ConsistencySchedule`), which only
  `ConsistencySampler` steps on.

A sampler says which families it steps on (`Sampler.families`) and makes
one plan of update coefficients. Euler, Heun and DPM-Solver plan over the
noise levels the process gives for their options (`sampling_levels`: the
levels, how the state is scaled at each, where sampling starts); the process
turns the plan into the loop's tables (`output_tables`), so the loop never
asks which process it is. A sampler's `Spacing` and a process's `Levels` live in
`schedules.levels`; the registry of processes (`register_process`,
`PROCESSES`) and their declared settings in `schedules.registry`.
"""

import dataclasses

import numpy as np
from keras import ops

from keras_diffusion.schedules.levels import Levels
from keras_diffusion.utils import stateless
from keras_diffusion.utils.checks import check_float
from keras_diffusion.utils.configurable import Configurable

# The sampler of a model that names none, by process and prediction type
# ("*": every prediction type), as `(samplers.get name, num_steps)`: the best
# measured for each (docs/quality.md, "Default samplers" and "Objectives").
DEFAULT_SAMPLERS = {
    "vp": {
        # DPM-Solver's multistep extrapolates x0 estimates, which epsilon
        # prediction makes large at the top timesteps: digits FD/floor 14.2
        # for DDIM-50 against 44.9 for DPM-Solver++ 20 (cosine schedule).
        "epsilon": ("ddim", 50),
        # Digits 1.48 against DDIM-50's 1.57; 32x32 emoji 1.24 against 3.19.
        "v_prediction": ("dpm", 20),
        # Digits 1.79 against DDIM-50's 2.18.
        "sample": ("dpm", 20),
    },
    # Heun over 18 Karras sigmas (35 model calls): Karras et al.'s choice.
    "edm": {"*": ("heun", 18)},
    # DPM-Solver++ 2M: flow matching's best sampler at 2 to 32 calls.
    "flow": {"*": ("dpm", 16)},
    # Two calls, the second from half the noise: FD/floor 1.74 on the digits
    # (50 epochs) and 2.97 on 32x32 emoji (40 epochs), against 1.44 and 3.41
    # for one call (docs/quality.md, "Few steps").
    "consistency": {"*": ("consistency", 2)},
    # One call: the mean velocity over the whole interval from noise (the
    # digits at 25 epochs: FD/floor 1.87 at one call, 1.72 at two;
    # docs/quality.md, "One call").
    "meanflow": {"*": ("meanflow", 1)},
}
# The sampler of a `.keras` file saved before models recorded theirs, so
# that it keeps generating the same images: DDIM-50 on a VP schedule.
LEGACY_DEFAULT_SAMPLERS = {"vp": {"*": ("ddim", 50)}}

# What a network may be trained to predict on a VP process.
PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")


@dataclasses.dataclass
class TrainingStep:
    """One batch of the train step, as a process's `training_loss` sees it.

    Attributes:
        x0: float32 tensor `(batch, H, W, C)`, the clean samples.
        labels: int32 labels `(batch,)` (label dropout applied) or `None`.
        seeds: the two stateless seeds `(levels, noise)` of the step.
        training: bool, passed to the denoiser.
        call_denoiser: callable `(inputs, training) -> network output`.
        iteration: the optimizer updates made so far (an int tensor), for a
            process whose objective changes over training.
        unconditional: for a model with a null condition, a callable
            `() -> (null, dropped)`: the denoiser's third input of the null
            for the batch, and bool `(batch,)`, the examples whose `labels`
            are the null (condition dropout), or `(None, None)` where the
            conditioning has no null class; `None` unconditioned. For a
            process that trains on the null branch too (guidance as a
            condition).
    """

    x0: object
    labels: object
    seeds: tuple
    training: bool
    call_denoiser: object
    iteration: object = 0
    unconditional: object = None

    @property
    def batch_size(self):
        return ops.shape(self.x0)[0]

    def noise(self):
        """The step's standard normal noise, of the shape of `x0`."""
        return stateless.normal(ops.shape(self.x0), self.seeds[1])

    def per_example(self, levels):
        """`levels` `(batch,)` shaped to broadcast against `x0`."""
        return ops.reshape(levels, (-1,) + (1,) * (len(self.x0.shape) - 1))

    def network(self, x, t, labels=None):
        """The network's float32 output on `x` and time input `t` (and the
        labels of a conditional model, or the `labels` given)."""
        labels = self.labels if labels is None else labels
        inputs = [x, t] if labels is None else [x, t, labels]
        return ops.cast(self.call_denoiser(inputs, self.training), "float32")

    def mean_square(self, error):
        """The mean of `error**2` over each example: shape `(batch,)`."""
        return ops.mean(ops.square(error), axis=tuple(range(1, len(self.x0.shape))))


class Process(Configurable):
    """Base class of the forward processes: the questions each answers.

    A subclass sets the class attributes below and implements
    `training_loss`, `output_tables` and, for the samplers that step over its
    noise levels, `sigmas` and `init_sigma` (or `sampling_levels`); the rest
    has defaults that fit most.
    """

    # The process's name: `--process NAME` and the key of `DEFAULT_SAMPLERS`.
    name = None
    # What the samplers step on: "vp", "sigma" or "flow" (module docstring).
    sampler_family = None
    # The prediction types and loss weightings its objective accepts; the
    # first is the default. `objective_note` says why there are no others.
    prediction_types = ("epsilon",)
    loss_weightings = ("none",)
    objective_note = "the process fixes what the network predicts"
    # Its settings in a training run, declared once (`Setting`s): each a
    # `TrainConfig` field, a flag of `scripts/train.py` (under "process:
    # NAME" in its --help), a key of config.json's "process" section and a
    # row of docs/flags.md, setting the constructor argument of its name
    # (or `argument`).
    settings = ()
    # A run's settings measured best for this process, by dataset, taken
    # where a run of that dataset gives none in place of its preset's (each
    # citing its docs/quality.md row): `{"digits": {"epochs": 50}}`.
    measured_defaults = {}
    # What the network is given, in words: a checkpoint of another process
    # would be called on inputs it never learned (`--init-from`).
    network_inputs = "its own noise levels"
    # The default samplers by prediction type, when `DEFAULT_SAMPLERS` has
    # no entry of this name (a process outside the library).
    default_samplers = {"*": ("euler", 30)}
    # The grid's classifier-free guidance where a run gives none and its
    # preset guides (above 1), in place of the preset's; `None` keeps the
    # preset's.
    default_guidance_scale = None
    # The times the network is given an example: 1, its time input `t` of
    # shape (batch,); 2, a pair (batch, 2) (a mean flow's interval: its end
    # and length), for which the run builds `UNet(time_inputs=2)`; 3 with
    # the guidance scale as a condition (`guidance_input`).
    time_inputs = 1
    # Whether the network is given the guidance scale (a column of its time
    # input, `guided_time`), so that a guided image is one call.
    guidance_input = False
    # Whether the terminal-error check (`diagnostics.SamplingCheck`) applies:
    # it measures at the top timesteps of a VP schedule.
    has_terminal_check = False

    @property
    def terminal_signal(self):
        """The signal left where sampling starts from pure noise: 0 when the
        process starts from noise alone."""
        return 0.0

    @property
    def prediction_type(self):
        """What the network predicts, by which the samplers read its output
        (`output_tables`): a process that fixes its objective answers the
        first of `prediction_types`; `NoiseSchedule` holds its own."""
        return self.prediction_types[0]

    def guided_time(self, time, guidance_scale):
        """A sampler's time input for the network at `guidance_scale`: with
        `guidance_input`, the scale's column added; itself otherwise."""
        return time

    def training_loss(self, step):
        """The mean loss of a `TrainingStep`'s batch, on the device, float32,
        by the process's own objective.

        Args:
            step: the `TrainingStep`: its clean samples, labels, seeds and
                the denoiser's call.
        """
        raise NotImplementedError

    def sampling_levels(self, spacing):
        """The noise levels of a sampler's `Spacing`, as `Levels`.

        By default those of a process stepped as x = x0 + sigma n: its
        `sigmas(num_steps)`, then 0 (or `sigma_min`), read at `sigma`
        (`sigma_tables`), the unit noise multiplied by `init_sigma`.
        """
        last = self.sigma_min if spacing.final_sigma == "sigma_min" else 0.0
        sigma = np.append(self.sigmas(spacing.num_steps), last)
        return Levels(
            alpha=np.ones_like(sigma),
            sigma=sigma,
            reading={"sigma": sigma[:-1]},
            init_sigma=float(self.init_sigma),
        )

    def output_tables(self, plan, prediction_type):
        """The loop's reading of the network output for a sampler's `plan`.

        Returns the float64 per-row tables `t` and `in_scale` (the network's
        inputs: `denoise_fn(in_scale * x, t)`; with a `t_interval` table,
        the time input of a process of `time_inputs = 2` is the pair `(t,
        t_interval)` a row, shape `(batch, 2)`), `x0_x`, `x0_out`, `eps_x`,
        `eps_out` (x0 = x0_x x + x0_out out, eps = eps_x x + eps_out out) and
        `a_state`, `s_state` (the state x = a_state x0 + s_state z).
        """
        raise NotImplementedError

    @classmethod
    def check_objective(cls, prediction_type="epsilon", loss_weighting="none"):
        """Raises `ValueError` unless the process trains with them."""
        for name, value, choices in (
            ("prediction_type", prediction_type, cls.prediction_types),
            ("loss_weighting", loss_weighting, cls.loss_weightings),
        ):
            if value in choices:
                continue
            if len(choices) == 1:
                raise ValueError(
                    f"Argument `{name}` does not apply to the {cls.name!r} "
                    f"process ({cls.__name__}: {cls.objective_note}); leave it "
                    f"at {choices[0]!r}. Received: {name}={value!r}"
                )
            allowed = ", ".join(repr(c) for c in choices)
            raise ValueError(
                f"Argument `{name}` must be one of {allowed} on the "
                f"{cls.name!r} process ({cls.__name__}: {cls.objective_note}). "
                f"Received: {name}={value!r}"
            )

    def with_objective(
        self,
        prediction_type=None,
        loss_weighting=None,
        min_snr_gamma=None,
        replace=True,
    ):
        """This process trained with the objective given (`None`: its own),
        for `DiffusionModel`'s arguments of the same names.

        A process that fixes its objective refuses any other
        (`check_objective`) and returns itself; one that holds an objective
        (`NoiseSchedule`) returns a copy with it set, never changing itself
        (it overrides `_set_objective`, which this method answers with).

        Args:
            prediction_type: str or `None`.
            loss_weighting: str or `None`.
            min_snr_gamma: float or `None`: the Min-SNR gamma, read by a
                process with Min-SNR weighting.
            replace: bool: `False` refuses an argument that differs from a
                setting this process holds at other than its default.
        """
        objective = {
            "prediction_type": prediction_type,
            "loss_weighting": loss_weighting,
            "min_snr_gamma": min_snr_gamma,
        }
        return self._set_objective(objective, replace)

    def _set_objective(self, objective, replace):
        """`with_objective`'s answer, its arguments in `objective` (by name,
        `None`: not given): this process, once it has refused any other
        objective than its own. A process that holds an objective overrides
        it to return a copy with `objective` set."""
        self.check_objective(
            objective["prediction_type"] or self.prediction_type,
            objective["loss_weighting"] or self.loss_weightings[0],
        )
        if objective["min_snr_gamma"] is not None:
            check_float("min_snr_gamma", objective["min_snr_gamma"], greater_than=0.0)
        return self

    @classmethod
    def default_sampler(cls, prediction_type="epsilon", legacy=False):
        """`(name, num_steps)` of the sampler for a model naming none.

        Args:
            prediction_type: the model's prediction type.
            legacy: the sampler of a `.keras` file saved before models
                recorded one (`LEGACY_DEFAULT_SAMPLERS`).
        """
        table = DEFAULT_SAMPLERS.get(cls.name, cls.default_samplers)
        if legacy:
            table = LEGACY_DEFAULT_SAMPLERS.get(cls.name, table)
        return table.get(prediction_type, table.get("*"))

    @classmethod
    def earlier_settings(cls):
        """The values of settings added since a file of this process was
        saved without them (`Setting.earlier`), by setting name."""
        return {s.name: s.earlier for s in cls.settings if s.earlier is not None}

    @classmethod
    def from_config(cls, config):
        # A `.keras` file saved before a setting existed trained without it.
        names = {s.name: s.constructor_argument for s in cls.settings}
        earlier = {names[k]: v for k, v in cls.earlier_settings().items()}
        return super().from_config({**earlier, **config})

    @classmethod
    def from_run_settings(cls, values, facts=None):
        """The process of a resolved run's settings (a `TrainConfig` dict).

        A `None` value takes, in turn: the run's fact of the setting's
        `filled_by` (from `facts`, a dict by fact name, when it holds it),
        its `run_default`, the constructor's default.
        """
        kwargs = {}
        for setting in cls.settings:
            if setting.objective:
                continue
            value = values.get(setting.name)
            if value is None and setting.filled_by is not None:
                value = (facts or {}).get(setting.filled_by)
            if value is None:
                value = setting.run_default
            if value is not None:
                kwargs[setting.constructor_argument] = value
        return cls(**kwargs)

    @classmethod
    def run_choices(cls, given):
        """Run settings the process chooses from the others a run gives.

        Args:
            given: the run's settings as given, by `TrainConfig` field
                (`None`: not given).

        Returns:
            The values of fields the run left unset that this process sets
            in place of the preset's (`{"timesteps": 10}`), by field.

        Raises:
            ValueError: a combination of settings it cannot train with, both
                named.
        """
        return {}

    def run_values(self):
        """The run settings this process holds, by `TrainConfig` field."""
        config = self.get_config()
        return {
            setting.name: config[setting.constructor_argument]
            for setting in self.settings
            if not setting.objective
        }

    def continued_values(self):
        """The run settings of a run that goes on training this process's
        model (`--init-from`): `run_values()`, but where an objective that
        moves over a run has ended."""
        return self.run_values()


def sigma_tables(process, plan):
    """The loop's tables on the state x = x0 + sigma n of a process with a
    preconditioned denoiser D = c_skip x + c_out F (`preconditioning`): the
    network gets `c_in x` and `c_noise`, as diffusers' `EDMEulerScheduler`
    and `EDMDPMSolverMultistepScheduler`."""
    sigma = np.asarray(plan["sigma"], np.float64)
    sigma_out = np.asarray(plan.get("sigma_out", sigma), np.float64)
    _, _, c_in, c_noise = process.preconditioning(sigma)
    c_skip, c_out, _, _ = process.preconditioning(sigma_out)
    return {
        "t": c_noise,
        "in_scale": c_in,
        # x0 = c_skip x + c_out F and eps = (x - x0) / sigma.
        "x0_x": c_skip,
        "x0_out": c_out,
        "eps_x": (1.0 - c_skip) / sigma_out,
        "eps_out": -c_out / sigma_out,
        # The state x = x0 + sigma n.
        "a_state": np.ones_like(sigma),
        "s_state": sigma,
    }
