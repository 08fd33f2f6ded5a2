"""MeanFlowSchedule: a process that samples in one call, trained with `fit`.

A mean flow (Geng et al., 2025) learns the average velocity over an interval
of flow matching's straight path, u(z_t, r, t) = 1/(t - r) of the integral
of v from r to t, so that one call jumps from level t to level r:
z_r = z_t - (t - r) u(z_t, r, t). From pure noise (t = 1) to the data
(r = 0) that is one call. Differentiating (t - r) u along the path gives the
MeanFlow identity, the regression target of u:

    u  <-  v - (t - r) du/dt      (du/dt = J_z u v + d u / d t, r fixed)

with v = n - x0, the conditional velocity, and the derivative along the
path computed once a step by one forward-mode pass
(`tf.autodiff.ForwardAccumulator`) inside the compiled step. Where r = t
the target is the velocity: flow matching's loss. The network is given
both times, `(t * T, (t - r) * T)` (`time_inputs = 2`, the papers'
embedding of t and t - r), on a slow time scale T (2 by default: the
derivative of the sinusoidal embedding of t * 1000 takes in its fast waves,
as the few-step process's continuous form measured). The loss is the
papers' adaptive weighting, ||e||^2 / sg(||e||^2 + c)^p.

Guidance as a condition (improved MeanFlow): a share of each batch draws a
guidance scale w, given to the network as a third time column (w - 1), and
its path moves at the guided velocity w v + (1 - w) u(z_t, t, t | null),
the network's own unconditional velocity (one more call, without
gradient, on that share). `generate(..., guidance_scale=w)` then makes one
call an image at any w in the trained range; the null branch is trained
on the examples dropped to the null, at w = 1.

`MeanFlowSampler` samples it: one call, or a few jumps down a spacing of
levels, each the exact mean-flow step (deterministic, no fresh noise).
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.schedules import forward_mode
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule
from keras_diffusion.schedules.registry import register_process
from keras_diffusion.utils import stateless
from keras_diffusion.utils.checks import check_float
from keras_diffusion.utils.settings import Setting

# The time scale T where none is given: the derivative along the path
# takes in d/dt of the sinusoidal embedding of t * T, whose fast waves a
# large T makes erratic (digits, one call, FD/floor: 2.30 at T = 2 against
# 2.69 at 10 on CIFAR-10's settings; 5.05 at 100 against 3.06 at 10 on
# another row; docs/quality.md, "One call").
MEANFLOW_TIMESTEPS = 2
# The adaptive weighting's c, as MeanFlow's code (`norm_eps`).
ADAPTIVE_EPSILON = 1e-3
# The time density in place of flow matching's logit-normal(0, 1): MeanFlow's
# CIFAR-10 U-Net's std, its mean moved toward the noise (digits, one call:
# FD/floor 1.87 at -1, 2.30 at CIFAR-10's -2, 2.60 at 0; docs/quality.md,
# "One call").
TIME_DENSITY = {"logit_mean": -1.0, "logit_std": 2.0}
# Guidance as a condition: the largest scale training draws, and the share
# of each batch trained at a drawn scale (the rest at w = 1). On the digits
# (25 epochs) a guided image in one call at 1.25 scores FD/floor 2.52 with
# 0.96 of the samples read as their label, where two calls of the network
# trained without it gave 2.94; w up to 3 on the whole batch gave 3.27 and
# cost the unguided samples more (conditional 3.05 against 2.21 here, 1.87
# without; docs/quality.md, "One call").
GUIDANCE_MAX = 2.0
GUIDANCE_SHARE = 0.5


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion")
class MeanFlowSchedule(FlowMatchSchedule):
    """A one-call process: the mean velocity over an interval (MeanFlow).

    The data is noised as flow matching does, `z_t = (1 - t) x0 + t n`; the
    network is called with the pair `(t * T, (t - r) * T)`, and `w - 1`
    with guidance as a condition (so it needs
    `UNet(time_inputs=schedule.time_inputs)`, 3 or 2, which a training run
    builds) and predicts the
    mean velocity u from level t down to level r. Training draws two levels
    by `timestep_sampling` (t the larger), keeps the interval for the
    `interval_share` of examples and sets r = t for the rest (flow matching's
    velocity), and regresses u onto `v - (t - r) du/dt` (module docstring).
    Sample it with `MeanFlowSampler`: one model call, or a few.

    Args:
        interval_share: float in [0, 1], the share of examples trained on an
            interval r < t; the rest have r = t. Defaults to `0.75`, as
            MeanFlow's CIFAR-10 U-Net (its ImageNet DiT: 25%, which on the
            digits samples worse in one call: docs/quality.md, "One call").
        adaptive_power: float >= 0, the p of the adaptive loss weighting
            ||e||^2 / sg(||e||^2 + 1e-3)^p; 0 is the plain mean squared
            error. Defaults to `0.75`, as MeanFlow's CIFAR-10 U-Net.
        guidance_max: float >= 1, the largest guidance scale training draws
            for a conditional model, given to the network (a third time
            input: `UNet(time_inputs=3)`) so that a guided image is one
            call (module docstring); `1` trains none, and guidance takes
            two calls (the conditional and the null branch). Defaults to
            `2.0`.
        guidance_share: float in [0, 1], the share of each batch trained
            at a drawn scale (the rest at w = 1). Defaults to
            `0.5`.
        num_train_timesteps: int >= 2, the time scale T of the network's
            time input. Defaults to `2` (module docstring).
        logit_mean: float, the mean of the logit-normal draw of the two
            levels. Defaults to `-1.0`.
        logit_std: float > 0, its standard deviation. Defaults to `2.0`.
        **flow_options: `FlowMatchSchedule`'s other arguments (`shift`,
            `timestep_sampling`, `mode_scale`).

    Example:

    ```python
    schedule = keras_diffusion.MeanFlowSchedule()
    unet = keras_diffusion.UNet((32, 32, 3), time_inputs=schedule.time_inputs)
    model = keras_diffusion.DiffusionModel(unet, schedule=schedule)
    model.fit(images, epochs=...)
    model.generate(16)  # one model call an image
    ```

    Reference:
        - [Geng et al., 2025](https://arxiv.org/abs/2505.13447) (MeanFlow)
    """

    name = "meanflow"
    sampler_family = "meanflow"
    # The grid's guidance, one call an image with guidance as a condition:
    # FD/floor 2.52 on the digits with 0.96 read as the label; 1.5 gives
    # 3.11 with 0.97, 2.0 4.92 (docs/quality.md, "One call").
    default_guidance_scale = 1.25
    objective_note = (
        "the network predicts the mean velocity over an interval, trained by "
        "the MeanFlow identity"
    )
    settings = (
        *(
            dataclasses.replace(s, default=TIME_DENSITY[s.name])
            if s.name in TIME_DENSITY
            else s
            for s in FlowMatchSchedule.settings
        ),
        Setting(
            "interval_share",
            float,
            0.75,
            help="share of examples trained on an interval r < t (the rest "
            "r = t, flow matching's velocity)",
        ),
        Setting(
            "adaptive_power",
            float,
            0.75,
            help="p of the adaptive loss weighting ||e||^2 / (||e||^2 + c)^p; "
            "0 is the plain MSE",
        ),
        Setting(
            "guidance_max",
            float,
            GUIDANCE_MAX,
            help="guidance as a condition: scales w in [1, this] drawn in "
            "training and given to the network, so that a guided image is "
            "one call; 1 trains none (guidance by two calls)",
            earlier=1.0,
        ),
        Setting(
            "guidance_share",
            float,
            GUIDANCE_SHARE,
            help="share of each batch trained at a drawn guidance scale, "
            "which calls the null branch too (the rest at w = 1)",
        ),
    )
    network_inputs = (
        "the pair (t * T, (t - r) * T) (and w - 1, with guidance as a "
        "condition) on (1 - t) x0 + t n, predicting the mean velocity from t "
        "down to r"
    )

    def __init__(
        self,
        *,
        interval_share=0.75,
        adaptive_power=0.75,
        guidance_max=GUIDANCE_MAX,
        guidance_share=GUIDANCE_SHARE,
        num_train_timesteps=MEANFLOW_TIMESTEPS,
        logit_mean=TIME_DENSITY["logit_mean"],
        logit_std=TIME_DENSITY["logit_std"],
        **flow_options,
    ):
        super().__init__(
            num_train_timesteps=num_train_timesteps,
            logit_mean=logit_mean,
            logit_std=logit_std,
            **flow_options,
        )
        self.interval_share = check_float(
            "interval_share", interval_share, minimum=0.0, maximum=1.0
        )
        self.adaptive_power = check_float("adaptive_power", adaptive_power, 0.0)
        self.guidance_max = check_float("guidance_max", guidance_max, 1.0)
        self.guidance_share = check_float(
            "guidance_share", guidance_share, minimum=0.0, maximum=1.0
        )

    @property
    def guidance_input(self):
        """Whether the network is given the guidance scale (a third time
        column): `guidance_max > 1`."""
        return self.guidance_max > 1.0

    @property
    def time_inputs(self):
        """The network's time columns: `(t, t - r)`, and the guidance
        scale's where it is an input."""
        return 3 if self.guidance_input else 2

    @classmethod
    def run_choices(cls, given):
        """The slow time scale where a run gives no `--timesteps`; `remat`
        refused (forward-mode autodiff does not pass through a recomputed
        block), see `Process.run_choices`."""
        if given.get("remat"):
            raise ValueError(
                "Argument `remat` (--remat) does not apply to the 'meanflow' "
                "process (--process meanflow): its forward-mode derivative "
                "cannot pass through a recomputed block; drop --remat. "
                "Received: remat=True"
            )
        if given.get("timesteps") is None:
            return {"timesteps": MEANFLOW_TIMESTEPS}
        return {}

    def draw_interval(self, batch, seed):
        """`(t, r)`, float32 `(batch,)` each, t >= r: two levels drawn by
        `timestep_sampling`, the larger t; r = t outside the
        `interval_share`."""
        pair = ops.reshape(self.draw_levels(2 * batch, seed), (2, -1))
        t, r = ops.max(pair, axis=0), ops.min(pair, axis=0)
        mask_seed = tf.random.experimental.stateless_fold_in(seed, 1, alg="philox")
        keep = stateless.uniform([batch], mask_seed) < self.interval_share
        return t, ops.where(keep, r, t)

    def time_input(self, t, r, guidance=None):
        """The network's time input `(batch, time_inputs)`: `(t * T,
        (t - r) * T)`, and `w - 1` of the guidance scales `guidance` (1
        where `None`) when the network takes them."""
        T = float(self.num_train_timesteps)
        columns = [t * T, (t - r) * T]
        if self.guidance_input:
            columns.append(ops.zeros_like(t) if guidance is None else guidance - 1.0)
        return ops.stack(columns, axis=1)

    def guided_time(self, time, guidance_scale):
        """A sampler's time input `(batch, 2)` with the guidance scale's
        column where the network takes it (`guidance_input`), else itself."""
        if not self.guidance_input:
            return time
        w = ops.cast(guidance_scale, time.dtype) - 1.0
        return ops.concatenate([time, ops.ones_like(time[:, :1]) * w], axis=1)

    def _guided_velocity(self, step, z, t, velocity):
        """`(w, v~)`: each example's guidance scale and the guided velocity
        its path moves at, v~ = w v + (1 - w) u(z_t, t, t | null), the
        network's own stop-gradient unconditional velocity (MeanFlow's eq.
        15, w a condition as improved MeanFlow's). The first
        `guidance_share` of the batch (a random share: batches are
        shuffled) draws w uniformly in [1, guidance_max], and only those
        examples call the null branch; the rest, those dropped to the null
        and a model without one keep w = 1 (v~ = v)."""
        ones = ops.ones_like(t)
        if step.unconditional is None:
            return ones, velocity
        null, dropped = step.unconditional()
        if null is None:
            return ones, velocity
        batch = step.batch_size
        guided = ops.cast(
            ops.round(self.guidance_share * ops.cast(batch, "float32")), "int32"
        )
        seed = tf.random.experimental.stateless_fold_in(step.seeds[0], 2, alg="philox")
        w = 1.0 + (self.guidance_max - 1.0) * stateless.uniform([batch], seed)
        w = ops.where(dropped | (ops.arange(batch) >= guided), ones, w)
        u_null = step.network(
            z[:guided], self.time_input(t[:guided], t[:guided]), labels=null[:guided]
        )
        scale = step.per_example(w[:guided])
        head = scale * velocity[:guided] + (1.0 - scale) * ops.stop_gradient(u_null)
        return w, ops.concatenate([head, velocity[guided:]], axis=0)

    def training_loss(self, step):
        """The adaptively weighted MSE of u(z_t, r, t) to its stop-gradient
        target (module docstring), float32 (see `Process.training_loss`)."""
        t, r = self.draw_interval(step.batch_size, step.seeds[0])
        x0, noise = step.x0, step.noise()
        velocity = noise - x0
        z = self.add_noise(x0, noise, t)
        guidance = None
        if self.guidance_input:
            guidance, velocity = self._guided_velocity(step, z, t, velocity)
        # d/dt of the time input (t T, (t - r) T, w - 1) with r fixed: (T,
        # T, 0).
        T = float(self.num_train_timesteps)
        rates = (T, T, 0.0)[: self.time_inputs]
        output, derivative = forward_mode.along_path(
            step, z, self.time_input(t, r, guidance), velocity, rates
        )
        target = ops.stop_gradient(velocity - step.per_example(t - r) * derivative)
        error = step.mean_square(output - target)
        if self.adaptive_power == 0.0:
            return ops.mean(error)
        weight = ops.power(error + ADAPTIVE_EPSILON, self.adaptive_power)
        return ops.mean(error / ops.stop_gradient(weight))

    def output_tables(self, plan, prediction_type):
        """Flow matching's reading of the output as a velocity (see
        `FlowMatchSchedule.output_tables`), with the interval's length each
        row: `t_interval`, `(s - s_next) * T` down to the next row's level
        (0 after the last). The mean velocity u over it makes the
        `MeanFlowSampler`'s step z_next = z - (s - s_next) u."""
        tables = super().output_tables(plan, prediction_type)
        s = np.asarray(plan["sigma"], np.float64)
        following = np.append(s[1:], 0.0)
        tables["t_interval"] = (s - following) * self.num_train_timesteps
        return tables
