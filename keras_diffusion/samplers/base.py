"""The shared machinery of the samplers: validation, timesteps, one compiled loop.

Every sampler here is a linear update of the current sample `x`, the model's
estimate of the clean sample `x0`, its estimate of the noise `eps`, the `x0`
of the previous step (multistep solvers) and fresh noise:

    x_next = c_x * x + c_x0 * x0 + c_eps * eps + c_prev * x0_prev + c_noise * z

A subclass computes those per-step coefficients once, in float64 NumPy, in
one method (`_plan`): on a VP schedule's `alphas_cumprod` (DDPM, DDIM,
RePaint), or over the noise levels a process gives for the sampler's options
(`Process.sampling_levels`: Euler, Heun, DPM-Solver, as k-diffusion's
samplers over sigmas); the process turns the model output into `x0` and
`eps` for each prediction type (`Process.output_tables`) and this module runs
the steps in one `tf.while_loop`, so that a caller's `tf.function` traces the
denoiser once, whatever the number of steps.
"""

import inspect

import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.samplers import loop
from keras_diffusion.schedules.levels import Spacing
from keras_diffusion.schedules.process import PREDICTION_TYPES
from keras_diffusion.schedules.registry import PROCESSES
from keras_diffusion.schedules.vp_sampling import TIMESTEP_SPACINGS
from keras_diffusion.utils.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    is_int,
)
from keras_diffusion.utils.configurable import Configurable

# The options of diffusers' discrete timesteps (`Spacing`): they have meaning
# on a VP schedule only, other processes giving their own levels.
SPACING_OPTIONS = ("timestep_spacing", "steps_offset", "use_karras_sigmas")
_UPDATE_KEYS = ("c_x", "c_x0", "c_eps", "c_prev", "c_noise", "c_xprev")
# The samplers by short name (`samplers.get`), filled as the classes are
# defined, so that a refusal names the values a user types.
REGISTRY = {}


def applicable(schedule):
    """The short names of the samplers that step on `schedule`'s family."""
    family = schedule.sampler_family
    return [name for name, cls in REGISTRY.items() if family in cls.families()]


def check_noise(x_T):
    """Returns `x_T` as a float tensor of shape (batch, ...), or raises."""
    try:
        x_T = ops.convert_to_tensor(x_T)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"Argument `x_T` must be a float tensor. Received: x_T={x_T!r}"
        ) from error
    if "float" not in str(x_T.dtype):
        raise TypeError(
            "Argument `x_T` must be float unit-variance noise. "
            f"Received: x_T of dtype {x_T.dtype}"
        )
    if len(x_T.shape) < 1:
        raise ValueError(
            "Argument `x_T` must have shape (batch, ...). "
            f"Received: x_T of shape {tuple(x_T.shape)}"
        )
    return x_T


def vp_levels(t, abar):
    """The plan's `t`, `alpha`, `sigma` and `scale` where the state x is x_t.

    For the samplers that step on the variance-preserving x_t itself (DDPM,
    DDIM): `alpha = sqrt(abar)`, `sigma = sqrt(1 - abar)`, `scale = 1`.
    """
    return {
        "t": t,
        "alpha": np.sqrt(abar),
        "sigma": np.sqrt(1 - abar),
        "scale": np.ones_like(abar),
    }


def seed_tensor(seed):
    """A stateless seed: int32 tensor of shape (2,) from None, an int or a tensor.

    `None` draws one from TensorFlow's global generator (so
    `keras.utils.set_random_seed` makes it reproducible).
    """
    if seed is None:
        return tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
    if is_int(seed):
        seed = int(seed)
        return tf.constant([seed & 0x7FFFFFFF, (seed >> 31) & 0x7FFFFFFF], tf.int32)
    if isinstance(seed, bool) or not (
        tf.is_tensor(seed) or isinstance(seed, np.ndarray)
    ):
        raise TypeError(
            "Argument `seed` must be None, an int or an int32 tensor of shape (2,). "
            f"Received: seed={seed!r}"
        )
    if tuple(seed.shape) != (2,):
        raise ValueError(
            "Argument `seed` must have shape (2,) when it is a tensor. "
            f"Received: seed.shape={tuple(seed.shape)}"
        )
    return tf.cast(seed, tf.int32)


class Sampler(Configurable):
    """Base class of the samplers: a reverse process run as one compiled loop.

    A subclass names the families of processes it steps on (`steps_on`) and
    implements `_plan(schedule)`; this class validates, has the process read
    the model output for each prediction type, draws the per-step noise from
    a stateless seed and runs the loop.

    Args:
        num_steps: int >= 1, the number of denoiser evaluations.
        timestep_spacing: str, one of `"leading"`, `"trailing"`, `"linspace"`.
        steps_offset: int >= 0, added to the "leading" timesteps.

    Example, a sampler outside a model (`DiffusionModel.generate` runs it so):

    ```python
    sampler = keras_diffusion.DDIMSampler(num_steps=50)
    x0 = sampler.sample(lambda x, t: unet([x, t]), x_T, keras_diffusion.NoiseSchedule())
    ```
    """

    clip_sample = False
    clip_sample_range = 1.0
    # The short name of `samplers.get` and of the `--sampler` flag.
    name = None
    # The families of processes it steps on (`Process.sampler_family`), each
    # to its options without meaning there, which must keep their defaults.
    steps_on = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.name:
            REGISTRY[cls.name] = cls

    @classmethod
    def families(cls):
        """The families of processes this sampler steps on."""
        return tuple(cls.steps_on)

    def __init__(self, num_steps, timestep_spacing, steps_offset=0):
        self.num_steps = check_int("num_steps", num_steps, 1)
        self.timestep_spacing = check_choice(
            "timestep_spacing", timestep_spacing, TIMESTEP_SPACINGS
        )
        self.steps_offset = check_int("steps_offset", steps_offset, 0)

    def _set_clip(self, clip_sample, clip_sample_range):
        self.clip_sample = check_bool("clip_sample", clip_sample)
        self.clip_sample_range = check_float(
            "clip_sample_range", clip_sample_range, greater_than=0.0
        )

    def _steps_for(self, schedule):
        return self.num_steps

    def steps(self, schedule):
        """The number of steps on `schedule` (DDPM's `None` is T); img2img
        starts `int(steps * strength)` of them from the end."""
        return int(self._steps_for(schedule))

    def _spacing(self, rule="euler", final_sigma="zero"):
        """The `Spacing` this sampler asks a process's levels for."""
        return Spacing(
            num_steps=self.num_steps,
            rule=rule,
            timestep_spacing=self.timestep_spacing,
            steps_offset=self.steps_offset,
            use_karras_sigmas=getattr(self, "use_karras_sigmas", False),
            final_sigma=final_sigma,
        )

    def _plan(self, schedule):
        """Per-step float64 tables, one entry a denoiser evaluation.

        Returns a dict with the keys the process's `output_tables` reads the
        model output with (on a VP schedule `t`, `alpha`, `sigma`, `scale`;
        from `sampling_levels`, its `Levels.reading`), the update
        coefficients `c_x`, `c_x0`, `c_eps`, `c_prev`, `c_noise` (and
        `c_xprev`), and the scalar `init_sigma` that multiplies the unit
        starting noise. Raises `ValueError` where the steps do not fit the
        schedule.
        """
        raise NotImplementedError

    def plan(self, schedule):
        """The float64 plan of this sampler's steps on `schedule`."""
        return self._plan(schedule)

    def _timesteps(self, schedule):
        plan = self.plan(schedule)
        t = np.asarray(plan.get("t", 0.0))
        if not np.issubdtype(t.dtype, np.integer):
            t = schedule.output_tables(plan, "epsilon")["t"].astype(np.float32)
        return t

    def timesteps(self, schedule):
        """The timesteps the denoiser is evaluated at, as a NumPy array: the
        integers of DDPM, DDIM and DPM-Solver on a VP schedule (as diffusers
        lists them), else float32 (on an `EDMSchedule`, its `c_noise`
        inputs)."""
        self.check_process(schedule)
        return self._timesteps(schedule)

    def check_process(self, schedule):
        """Raises unless this sampler steps on `schedule`'s family of
        processes with its options as set (`validate` also checks its steps
        against the schedule)."""
        family = getattr(schedule, "sampler_family", None)
        if family is None:
            raise TypeError(
                "Argument `schedule` must be a process: a "
                "`keras_diffusion.NoiseSchedule`, `EDMSchedule`, "
                "`FlowMatchSchedule` or `keras_diffusion.schedules.Process`. "
                f"Received: schedule={schedule!r}"
            )
        if family not in self.steps_on:
            raise ValueError(
                f"Argument `sampler` ({self.name or type(self).__name__!r}) "
                f"does not run on the {schedule.name!r} process "
                f"({type(schedule).__name__}): it needs {self._processes()}; "
                "the samplers that do: " + "|".join(applicable(schedule)) + ". "
                f"Received: sampler={self!r}"
            )
        self._check_options(schedule, self.steps_on[family])

    @classmethod
    def _processes(cls):
        """The processes this sampler steps on, in words: `'vp'
        (NoiseSchedule)` for a sampler on alphas_cumprod."""
        names = [
            f"{name!r} ({process.__name__})"
            for name, process in PROCESSES.items()
            if process.sampler_family in cls.steps_on
        ]
        families = "/".join(cls.steps_on)
        return " or ".join(names) or f"a process of the {families} family"

    def validate(self, schedule):
        """Raises `ValueError` if this sampler cannot run on `schedule`."""
        self.check_process(schedule)
        self.plan(schedule)

    def _check_options(self, schedule, options):
        """Raises unless each of `options` keeps its default: they have no
        meaning on `schedule`, whose samplers step over its own levels."""
        params = inspect.signature(type(self).__init__).parameters
        for option in options:
            value = getattr(self, option)
            if value != params[option].default:
                raise ValueError(
                    f"Argument `{option}` of {type(self).__name__} has no "
                    f"meaning on the {schedule.name!r} process "
                    f"({type(schedule).__name__}), whose samplers step over its "
                    "own noise levels; leave it at its default. "
                    f"Received: {option}={value!r}"
                )

    def _tables(self, schedule, prediction_type):
        self.check_process(schedule)
        schedule.check_objective(prediction_type)
        plan = self.plan(schedule)
        tables = schedule.output_tables(plan, prediction_type)
        tables.update({key: plan[key] for key in _UPDATE_KEYS if key in plan})
        return self._checked(tables, prediction_type), float(plan["init_sigma"])

    @staticmethod
    def _checked(tables, prediction_type):
        bad = [key for key, v in tables.items() if not np.all(np.isfinite(v))]
        if bad:
            raise ValueError(
                "Argument `prediction_type` cannot be sampled on this schedule: "
                "x0 is undefined where alphas_cumprod is 0 (zero terminal SNR); "
                "use prediction_type='v_prediction'. "
                f"Received: prediction_type={prediction_type!r}"
            )
        return tables

    @staticmethod
    def step_noise(seed, step, shape):
        """The standard normal noise drawn at `step` from the stateless `seed`
        (`keras_diffusion.samplers.loop.noise`)."""
        return loop.noise(seed, step, shape)

    # Denoiser evaluations a step; Heun's predictor and corrector make 2.
    evaluations_per_step = 1

    def evaluations(self, num_steps):
        """The denoiser evaluations of `num_steps` steps: the last step of a
        two-stage sampler (Heun) has no corrector."""
        return self.evaluations_per_step * (num_steps - 1) + 1

    # Whether the loop can start at a later step (img2img).
    starts_part_way = True

    def sample(
        self,
        denoise_fn,
        x_T,
        schedule,
        prediction_type="epsilon",
        seed=None,
        edit=None,
    ):
        """Runs the reverse process from unit noise `x_T` to a sample x_0.

        Args:
            denoise_fn: callable `(x_t, t) -> output`, `x_t` at the model's
                (variance-preserving) scale and `t` a float32 vector of shape
                (batch,).
                On an `EDMSchedule` it gets `c_in * x` and `c_noise` (the
                network's preconditioned inputs) and returns the raw network
                output, to which the sampler applies `c_skip` and `c_out`.
                On a `FlowMatchSchedule` it gets x_s and s * T and returns
                the velocity.
            x_T: unit-variance noise, shape (batch, ...).
            schedule: the `keras_diffusion.NoiseSchedule`, `EDMSchedule` or
                `FlowMatchSchedule` the model was trained on.
            prediction_type: str, what `denoise_fn` returns: `"epsilon"`,
                `"v_prediction"` or `"sample"`; on an `EDMSchedule` or a
                `FlowMatchSchedule` only the default applies. Defaults to
                `"epsilon"`.
            seed: None, an int or an int32 tensor of shape (2,), for the noise
                of the stochastic samplers (an int `s` is the tensor `[s, 0]`).
                The same seed gives the same sample, eagerly, in a
                `tf.function` or under `jit_compile=True`. Defaults to `None`
                (a fresh seed).
            edit: optional `keras_diffusion.samplers.loop.Edit`: start from
                noised images after `begin_step` steps (img2img), and keep
                the `keep` region of the images (inpainting). Defaults to
                `None`.

        Returns:
            x_0, a float32 tensor of the shape of `x_T`.
        """
        if not callable(denoise_fn):
            raise TypeError(
                f"Argument `denoise_fn` must be callable. Received: {denoise_fn!r}"
            )
        check_choice("prediction_type", prediction_type, PREDICTION_TYPES)
        x_T = check_noise(x_T)
        tables, init_sigma = self._tables(schedule, prediction_type)
        stochastic = bool(np.any(tables["c_noise"] != 0.0))
        seed = seed_tensor(seed) if stochastic else None
        clip = self.clip_sample_range if self.clip_sample else None
        x = ops.cast(x_T, "float32")
        begin = 0 if edit is None else edit.begin_step * self.evaluations_per_step
        if begin == 0:
            x = x * init_sigma if init_sigma != 1.0 else x
        else:
            tables = loop.begin_row(tables, begin)
            a, s = (float(tables[key][begin]) for key in ("a_state", "s_state"))
            x = a * edit.images + s * x
        return loop.run(denoise_fn, x, tables, seed, clip, begin, edit)

    def get_config(self):
        """The constructor's arguments, each stored under its name: the
        base's first, then the sampler's own in their order."""
        config = super().get_config()
        base = ("num_steps", "timestep_spacing", "steps_offset")
        order = [p for p in base if p in config]
        order += [p for p in config if p not in order]
        return {p: config[p] for p in order}
