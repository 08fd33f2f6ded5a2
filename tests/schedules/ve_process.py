"""A process the library does not ship, in a module of its own: the
variance-exploding SDE of Song et al. (2021) in EDM's Table 1 form (x = x0 +
sigma n with log-uniform training sigmas, the network called on x itself and
log(sigma / 2), predicting the scaled noise -n: c_skip = 1, c_out = sigma,
c_in = 1, loss weight 1 / sigma**2), with run settings of its own names.

Importing it registers the process; `scripts/train.py --import
tests/schedules/ve_process.py --process ve` trains it, with its flags
`--noise-floor` and `--noise-ceiling` (docs/architecture.md, "Adding a
process"). It imports nothing from the tests, so that a script can import it
by its path.
"""

import keras
import numpy as np
from keras import ops

from keras_diffusion.schedules import Process, Setting, register_process, sigma_tables
from keras_diffusion.utils import stateless


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion_tests")
class VESchedule(Process):
    """Song et al.'s variance-exploding SDE, stepped as EDM's Table 1 VE."""

    name = "ve"
    sampler_family = "sigma"
    objective_note = "the network predicts the scaled noise -n"
    settings = (
        Setting(
            "noise_floor",
            float,
            0.02,
            help="the smallest noise level, trained and sampled",
            argument="sigma_min",
        ),
        Setting(
            "noise_ceiling",
            float,
            20.0,
            help="the largest noise level, where sampling starts",
            argument="sigma_max",
        ),
    )
    network_inputs = "log(sigma / 2) on x0 + sigma n"
    default_samplers = {"*": ("euler", 8)}

    def __init__(self, sigma_min=0.02, sigma_max=20.0):
        self.sigma_min = float(sigma_min)
        self.sigma_max = float(sigma_max)

    def sigmas(self, num_steps):
        return np.geomspace(self.sigma_max, self.sigma_min, int(num_steps))

    @property
    def init_sigma(self):
        return self.sigma_max

    def preconditioning(self, sigma, xp=np):
        ones = xp.ones_like(sigma)
        return ones, sigma, ones, xp.log(0.5 * sigma)

    def training_loss(self, step):
        u = stateless.uniform([step.batch_size], step.seeds[0])
        sigma = self.sigma_min * (self.sigma_max / self.sigma_min) ** u
        noise = step.noise()
        out = step.network(
            step.x0 + step.per_example(sigma) * noise, ops.log(0.5 * sigma)
        )
        # lambda ||D - x0||^2 = ||F - (x0 - x) / sigma||^2 = ||F + n||^2.
        return ops.mean(step.mean_square(out + noise))

    def output_tables(self, plan, prediction_type):
        return sigma_tables(self, plan)
