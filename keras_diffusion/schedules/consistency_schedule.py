"""ConsistencySchedule: a few-step process, trained from scratch with `fit`.

A consistency model on flow matching's straight path: the network F(x_s, s)
is read as the mean velocity from level s down to the data, so that its
one-call estimate of the clean sample is f(x_s, s) = x_s - s F(x_s, s) (the
flow process's own x0 reading, which makes f(x_0, 0) = x_0 hold by
construction). Training asks f to be constant along each probability-flow
path, d f / d s = 0, which with the conditional velocity v = n - x0 is the
regression of F onto the stop-gradient target

    F  <-  v - s dF/ds        (dF/ds: along the path, dx/ds = v)

(Geng et al., 2025, MeanFlow's identity with its interval ending at 0; the
continuous-time consistency condition of Lu & Song, 2024, in flow's
parametrisation). Two ways to the derivative, `training`:

- `"discrete"` (the default, measured best, docs/quality.md): a second,
  gradient-free call at the lower level r on the same path gives
  F <- v - r (F(x_s, s) - F(x_r, r)) / (s - r), the finite-difference form
  of consistency training (Song et al., 2023; Geng et al., 2024, ECT);
- `"continuous"`: the Jacobian-vector product of F along (v, 1), by
  `tf.autodiff.ForwardAccumulator` inside the compiled step.

A curriculum makes both start as flow matching and end as consistency
training (ECT's insight: with r = 0 the target is the velocity, the
diffusion loss): over `curriculum_steps` optimizer updates, in
`curriculum_stages` equal stages k = 0, 1, ..., the gap is rho = 2**-k of
the level (r = (1 - rho) s), or the derivative's weight 1 - rho. The state
and the network's inputs are flow matching's; `ConsistencySampler` samples
it in one call or a few, each call followed by fresh noise to the next
level (Song et al., 2023, Algorithm 1).
"""

import warnings

import keras
import numpy as np
from keras import ops

from keras_diffusion.schedules import forward_mode
from keras_diffusion.schedules.flow_schedule import FlowMatchSchedule
from keras_diffusion.schedules.registry import register_process
from keras_diffusion.utils.checks import check_choice, check_int
from keras_diffusion.utils.settings import Setting

TRAININGS = ("discrete", "continuous")

# The most stages float32 tells apart. Stage k's lower level r = (1 - 2**-k) s
# lies 2**-k s below s, in s's last 24 - k significand bits; r is rounded to
# half an ulp of s, up to 2**-24 s, which is 2**(k - 24) of the gap the
# finite difference divides by. Keeping 5 bits of the gap (an error under
# 3%) allows k <= 19, 20 stages: measured on the digits, 16-20 stages train
# alike (last-stage loss 9.5), 24-25 amplify the rounding (14, 34), and from
# 26 r rounds to s and the target is flow matching's.
_GAP_BITS = 5
MAX_CURRICULUM_STAGES = np.finfo(np.float32).nmant + 1 - _GAP_BITS + 1

# The continuous form's time input where a run gives none (`--timesteps`):
# with s * 1000 the derivative takes in the fast waves of the sinusoidal
# embedding and training fails (docs/quality.md, "Few steps": digits loss
# 7.67 after an epoch against 1.26 at 10).
CONTINUOUS_TIMESTEPS = 10


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion")
class ConsistencySchedule(FlowMatchSchedule):
    """A few-step process: consistency training on flow matching's path.

    The data is noised as flow matching does, `x_s = (1 - s) x0 + s n`, and
    the network is called with `s * num_train_timesteps`; its output F gives
    the one-call estimate `x0 = x_s - s F`. Training regresses F onto
    `v - s dF/ds` (module docstring), after a curriculum that starts at flow
    matching's velocity target. Sample it with `ConsistencySampler`: one
    model call, or a few.

    Args:
        training: str, `"discrete"` (a second call at a lower level: the
            finite difference) or `"continuous"` (a Jacobian-vector product
            by forward-mode autodiff). The continuous form needs a slow time
            input: with the U-Net's sinusoidal embedding of s * 1000 the
            derivative along the path is dominated by the embedding's fast
            waves and training fails; `num_train_timesteps=10` trains
            (docs/quality.md, "Few steps"); a training run that gives no
            `timesteps` takes 10 for it. Defaults to `"discrete"`.
        curriculum_steps: int >= 0, the optimizer updates over which the
            curriculum runs, then stays at its last stage; a training run
            sets it to its own length. 0 starts at the last stage. Defaults
            to `10000`.
        curriculum_stages: int from 1 to `MAX_CURRICULUM_STAGES` (20), its
            stages: stage k trains with the gap `2**-k` of the level (or the
            derivative's weight `1 - 2**-k`); 1 is flow matching alone; past
            20, float32 no longer resolves the last gaps. Defaults to `8`.
        **flow_options: the training levels and the time input, as
            `FlowMatchSchedule`'s arguments (`num_train_timesteps`, `shift`,
            `timestep_sampling`, `logit_mean`, `logit_std`, `mode_scale`).

    Example:

    ```python
    schedule = keras_diffusion.ConsistencySchedule(curriculum_steps=5000)
    model = keras_diffusion.DiffusionModel(unet, schedule=schedule)
    model.fit(images, epochs=...)
    model.generate(16, sampler=keras_diffusion.samplers.ConsistencySampler(2))
    ```

    Reference:
        - [Song et al., 2023](https://arxiv.org/abs/2303.01469)
        - [Geng et al., 2024](https://arxiv.org/abs/2406.14548) (ECT)
        - [Lu & Song, 2024](https://arxiv.org/abs/2410.11081) (sCM)
        - [Geng et al., 2025](https://arxiv.org/abs/2505.13447) (MeanFlow)
    """

    name = "consistency"
    sampler_family = "consistency"
    objective_note = "the network predicts the mean velocity to the data, x0 = x - s F"
    settings = (
        *FlowMatchSchedule.settings,
        Setting(
            "consistency_training",
            str,
            "discrete",
            TRAININGS,
            "the derivative of its target by a second call (discrete) or "
            "forward-mode autodiff (continuous; --timesteps defaults to 10 "
            "for it, and a larger one warns: at 1000 it does not train)",
            argument="training",
        ),
        # A run fills `curriculum_steps` with its own number of updates.
        Setting(
            "curriculum_steps",
            int,
            10000,
            help="updates over which training moves from flow matching to "
            "consistency (a run: the whole run)",
            filled_by="updates",
        ),
        Setting(
            "curriculum_stages",
            int,
            8,
            help="stages of that curriculum, 1 to 20 (float32 resolves no finer gap)",
        ),
    )
    # The measured run: on the digits, 50 epochs score FD/floor 1.74 at the
    # default 2 calls (1.79 run again) against 2.72 at the preset's 25
    # (docs/quality.md, "Few steps", the chosen run).
    measured_defaults = {"digits": {"epochs": 50}}
    # A one-call estimate moves the whole way with the guided output: on
    # the digits guidance 1.5 gives FD/floor 3.3 at two calls (5.8 at one),
    # with 0.98 of the samples classified as their label, as the VP
    # recipe's 2.0 does (5.5, 0.97); 2.0 gives 13-14 (docs/quality.md,
    # "Few steps").
    default_guidance_scale = 1.5
    network_inputs = (
        "flow matching's s * T on (1 - s) x0 + s n, predicting the mean "
        "velocity to the data"
    )

    def __init__(
        self,
        *,
        training="discrete",
        curriculum_steps=10000,
        curriculum_stages=8,
        **flow_options,
    ):
        super().__init__(**flow_options)
        self.training = check_choice("training", training, TRAININGS)
        self.curriculum_steps = check_int("curriculum_steps", curriculum_steps, 0)
        self.curriculum_stages = check_int("curriculum_stages", curriculum_stages, 1)
        if self.curriculum_stages > MAX_CURRICULUM_STAGES:
            raise ValueError(
                f"Argument `curriculum_stages` must be at most "
                f"{MAX_CURRICULUM_STAGES}: beyond it float32 resolves the "
                "last stages' gap s - r = 2**-k s to fewer than "
                f"{_GAP_BITS} bits, and from 26 stages r rounds to s. "
                f"Received: curriculum_stages={curriculum_stages}"
            )

    @classmethod
    def run_choices(cls, given):
        """The continuous form's time input where a run gives none; a
        continuous run is refused with `remat` (forward-mode autodiff does
        not pass through a recomputed block), and warned of a given fast
        time input (see `Process.run_choices`)."""
        if given.get("consistency_training") != "continuous":
            return {}
        if given.get("remat"):
            raise ValueError(
                "Argument `remat` (--remat) does not apply with "
                "consistency_training='continuous' (--consistency-training): "
                "its forward-mode derivative cannot pass through a "
                "recomputed block; drop --remat or train 'discrete'. "
                "Received: remat=True, consistency_training='continuous'"
            )
        timesteps = given.get("timesteps")
        if timesteps is None:
            return {"timesteps": CONTINUOUS_TIMESTEPS}
        if isinstance(timesteps, int) and timesteps > CONTINUOUS_TIMESTEPS:
            warnings.warn(
                f"consistency_training='continuous' (--consistency-training) "
                f"with timesteps={timesteps} (--timesteps): its derivative "
                "takes in the fast waves of the time embedding of "
                f"s * {timesteps} and training fails at 1000 (digits loss "
                f"7.67 after an epoch, 1.26 at {CONTINUOUS_TIMESTEPS}); it "
                f"is measured to train at --timesteps {CONTINUOUS_TIMESTEPS}, "
                "its default",
                stacklevel=2,
            )
        return {}

    def gap(self, iteration):
        """rho = 2**-k, the curriculum's gap at optimizer update `iteration`
        (float32 tensor): stage k = floor(stages * iteration / steps), the
        last stage after `curriculum_steps` updates."""
        last = float(self.curriculum_stages - 1)
        progress = ops.cast(iteration, "float32") / max(self.curriculum_steps, 1)
        stage = ops.floor(self.curriculum_stages * progress)
        if self.curriculum_steps == 0:
            stage = ops.convert_to_tensor(last)
        return ops.power(0.5, ops.minimum(stage, last))

    def training_loss(self, step):
        """The MSE of F(x_s, s) to its stop-gradient target (module
        docstring), float32 (see `Process.training_loss`)."""
        s = self.draw_levels(step.batch_size, step.seeds[0])
        x0, noise = step.x0, step.noise()
        velocity = noise - x0
        x_s = self.add_noise(x0, noise, s)
        rho = self.gap(step.iteration)
        if self.training == "continuous":
            T = float(self.num_train_timesteps)
            output, derivative = forward_mode.along_path(step, x_s, s * T, velocity, T)
            correction = (1.0 - rho) * step.per_example(s) * derivative
        else:
            output = step.network(x_s, s * self.num_train_timesteps)
            r = (1.0 - rho) * s
            x_r = self.add_noise(x0, noise, r)
            lower = step.network(x_r, r * self.num_train_timesteps)
            # r / (s - r) = (1 - rho) / rho, the same for every example.
            correction = (1.0 - rho) / rho * (output - lower)
        target = ops.stop_gradient(velocity - correction)
        return ops.mean(step.mean_square(output - target))

    def continued_values(self):
        """A model trained through its curriculum goes on at its last stage:
        a new run's count starts at 0, which would train it back toward
        flow matching."""
        return {**self.run_values(), "curriculum_steps": 0}
