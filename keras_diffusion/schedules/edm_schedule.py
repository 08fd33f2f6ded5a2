"""EDMSchedule: the noise levels and preconditioning of Karras et al. (2022)."""

import keras
import numpy as np
from keras import ops

from keras_diffusion.schedules.process import Process, sigma_tables
from keras_diffusion.schedules.registry import register_process
from keras_diffusion.utils import stateless
from keras_diffusion.utils.checks import check_float
from keras_diffusion.utils.settings import Setting


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion")
class EDMSchedule(Process):
    """The continuous-sigma diffusion of EDM (Karras et al., 2022).

    The data is noised as x = x0 + sigma * n, with log sigma ~ N(p_mean,
    p_std**2) in training. The network F is preconditioned: it is called on
    `c_in(sigma) * x` and `c_noise(sigma) = ln(sigma) / 4`, and the denoised
    estimate is `D = c_skip(sigma) * x + c_out(sigma) * F` (Table 1 of the
    paper). The samplers step over the Karras sigmas of `sigmas(num_steps)`.
    The NumPy methods compute in float64; `sigmas` is cast once to float32
    where a sampler builds its tables.

    Args:
        sigma_min: float > 0, the smallest noise level a sampler visits.
            Defaults to `0.002`.
        sigma_max: float > `sigma_min`, the largest one. Defaults to `80.0`.
        sigma_data: float > 0, the standard deviation of the data. Defaults
            to `0.5`.
        rho: float > 0, the exponent of the Karras sigma spacing, eq. (5).
            Defaults to `7.0`.
        p_mean: float, the mean of log sigma in training. Defaults to `-1.2`.
        p_std: float > 0, the standard deviation of log sigma in training.
            Defaults to `1.2`.

    Example:

    ```python
    schedule = keras_diffusion.EDMSchedule(sigma_data=0.5)
    model = keras_diffusion.DiffusionModel(unet, schedule=schedule)
    sigmas = schedule.sigmas(18)  # 80.0 ... 0.002
    ```

    Reference:
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    name = "edm"
    sampler_family = "sigma"
    objective_note = "its c_skip, c_out and loss weight fix what the network predicts"
    # A run takes sigma_data from its data (0.64 for the digits in [-1, 1],
    # not 0.5) and raises the mean of log sigma from Karras et al.'s -1.2,
    # whose median sigma of 0.30 spends a short run on low noise: the
    # settings of docs/quality.md's objectives table ("EDM and Heun").
    settings = (
        Setting(
            "sigma_data",
            float,
            0.5,
            help="the data's standard deviation (a run measures it on its "
            "first batches; 0.5 on latents)",
            filled_by="data_std",
        ),
        Setting("sigma_min", float, 0.002, help="smallest sigma"),
        Setting("sigma_max", float, 80.0, help="largest sigma"),
        Setting("rho", float, 7.0, help="Karras spacing exponent"),
        Setting(
            "p_mean",
            float,
            -1.2,
            help="mean of training log-sigma (a run: -0.6; Karras et al.'s "
            "-1.2 spends a short run on low noise)",
            run_default=-0.6,
        ),
        Setting("p_std", float, 1.2, help="std of training log-sigma"),
    )
    network_inputs = "EDM's c_noise and c_in * x"

    def __init__(
        self,
        sigma_min=0.002,
        sigma_max=80.0,
        sigma_data=0.5,
        rho=7.0,
        p_mean=-1.2,
        p_std=1.2,
    ):
        sigma_min = check_float("sigma_min", sigma_min, greater_than=0.0)
        sigma_max = check_float("sigma_max", sigma_max, greater_than=0.0)
        if sigma_min >= sigma_max:
            raise ValueError(
                "Argument `sigma_min` must be less than `sigma_max`. "
                f"Received: sigma_min={sigma_min}, sigma_max={sigma_max}"
            )
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.sigma_data = check_float("sigma_data", sigma_data, greater_than=0.0)
        self.rho = check_float("rho", rho, greater_than=0.0)
        self.p_mean = check_float("p_mean", p_mean)
        self.p_std = check_float("p_std", p_std, greater_than=0.0)
        # An extreme rho rounds sigma**(1 / rho) to 1 or overflows, in float64.
        sigmas = self.sigmas(3)
        if not (np.all(np.isfinite(sigmas)) and sigmas[0] > sigmas[1] > sigmas[2]):
            raise ValueError(
                "Argument `rho` leaves no distinct Karras sigmas between "
                f"sigma_min={sigma_min} and sigma_max={sigma_max} in float64. "
                f"Received: rho={rho}"
            )

    def sigmas(self, num_steps):
        """The `num_steps` Karras sigmas, eq. (5), from `sigma_max` down.

        Returns:
            float64 NumPy array; `sigma_max` first, `sigma_min` last (when
            `num_steps` > 1).
        """
        ramp = np.linspace(0.0, 1.0, int(num_steps))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            low = np.float64(self.sigma_min) ** (1.0 / self.rho)
            high = np.float64(self.sigma_max) ** (1.0 / self.rho)
            return (high + ramp * (low - high)) ** self.rho

    @property
    def init_sigma(self):
        """What the unit starting noise is multiplied by: diffusers'
        `init_noise_sigma` of its EDM schedulers, sqrt(sigma_max**2 + 1)."""
        return float(np.sqrt(self.sigma_max**2 + 1.0))

    def preconditioning(self, sigma, xp=np):
        """`c_skip`, `c_out`, `c_in`, `c_noise` of `sigma` (Table 1):
        sigma_data**2 / (sigma**2 + sigma_data**2) (1 at sigma = 0),
        sigma sigma_data / sqrt(sigma**2 + sigma_data**2), 1 / sqrt(sigma**2
        + sigma_data**2) (a unit-variance network input) and ln(sigma) / 4.

        Args:
            sigma: noise levels.
            xp: the array module: `numpy` (float64, the samplers' tables) or
                `keras.ops` (float32 tensors, the train step).
        """
        sd = self.sigma_data
        total = xp.square(sigma) + sd**2
        root = xp.sqrt(total)
        return sd**2 / total, sigma * sd / root, 1.0 / root, 0.25 * xp.log(sigma)

    def c_skip(self, sigma):
        return self.preconditioning(np.asarray(sigma, np.float64))[0]

    def c_out(self, sigma):
        return self.preconditioning(np.asarray(sigma, np.float64))[1]

    def c_in(self, sigma):
        return self.preconditioning(np.asarray(sigma, np.float64))[2]

    def c_noise(self, sigma):
        return self.preconditioning(np.asarray(sigma, np.float64))[3]

    def loss_weight(self, sigma):
        """(sigma**2 + sigma_data**2) / (sigma * sigma_data)**2, eq. (8)."""
        sigma = np.asarray(sigma, np.float64)
        return (sigma**2 + self.sigma_data**2) / (sigma * self.sigma_data) ** 2

    def draw_sigmas(self, batch, seed):
        """Training noise levels, log-normal: exp(p_mean + p_std n), (batch,)."""
        return ops.exp(self.p_mean + self.p_std * stateless.normal([batch], seed))

    def training_loss(self, step):
        """Eq. (8): sigma from `draw_sigmas`, x = x0 + sigma n, the network F
        called on `c_in x` and `c_noise`, and lambda(sigma) ||D - x0||**2 with
        D = c_skip x + c_out F; float32 (see `Process.training_loss`)."""
        sigma = self.draw_sigmas(step.batch_size, step.seeds[0])
        c_skip, c_out, c_in, c_noise = self.preconditioning(sigma, ops)
        c_skip, c_out, c_in = (step.per_example(c) for c in (c_skip, c_out, c_in))
        x = step.x0 + step.per_example(sigma) * step.noise()
        out = step.network(c_in * x, c_noise)
        # lambda ||D - x0||^2 with D = c_skip x + c_out F equals ||F - target||^2
        # for target = (x0 - c_skip x) / c_out, as lambda c_out^2 = 1; this form
        # does not subtract nearly equal D and x0 at small sigma.
        return ops.mean(step.mean_square(out - (step.x0 - c_skip * x) / c_out))

    def output_tables(self, plan, prediction_type):
        """The reading of a "sigma" plan (see `Process.output_tables`):
        `plan["sigma"]` is the level the network is evaluated at (its `c_in`
        and `c_noise`); `plan["sigma_out"]`, where given, the one its output
        is preconditioned at (diffusers' Euler with churn reads the output at
        the raised sigma_hat)."""
        return sigma_tables(self, plan)
