"""Noise schedules: the betas of the forward process and what follows from them."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.schedules import vp_objective, vp_sampling
from keras_diffusion.schedules.betas import (
    BETA_SCHEDULES,
    check_trained_betas,
    named_betas,
    rescale_betas_zero_snr,
)
from keras_diffusion.schedules.process import PREDICTION_TYPES, Process
from keras_diffusion.schedules.registry import register_process
from keras_diffusion.utils.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
)
from keras_diffusion.utils.settings import Setting


@register_process
@keras.saving.register_keras_serializable(package="keras_diffusion")
class NoiseSchedule(Process):
    """The discrete forward process q(x_t | x_0) of a diffusion model.

    Betas are computed in float64 NumPy and cast once to float32, with the same
    values as diffusers' `DDPMScheduler` for the same arguments. The tensor
    methods (`add_noise`, `velocity`, `snr`) always compute in float32, also
    under a mixed-precision policy, and return the dtype of `x0`.

    Args:
        num_train_timesteps: int, the number of diffusion steps T (at least 2).
            Defaults to `1000`.
        beta_schedule: str, one of `"linear"`, `"scaled_linear"`, `"cosine"`
            (alias `"squaredcos_cap_v2"`) or `"sigmoid"`. Defaults to `"linear"`.
        beta_start: float in (0, 1), the first beta of the linear, scaled
            linear and sigmoid schedules. Defaults to `1e-4`.
        beta_end: float in (0, 1), the last beta of those schedules. Defaults
            to `0.02`.
        rescale_zero_terminal_snr: bool, rescale the betas so that the last
            timestep carries no signal (alphas_cumprod[-1] = 0); pair it with
            v-prediction. Defaults to `False`.
        trained_betas: optional sequence of T betas in (0, 1) that replaces the
            named schedule. Defaults to `None`.
        prediction_type: str, what the network trained on this process
            predicts: `"epsilon"` (the noise), `"v_prediction"` (the
            velocity) or `"sample"` (x_0), as diffusers' schedulers' setting
            of that name; the samplers read the network's output by it.
            Defaults to `"epsilon"`.
        loss_weighting: `"none"` (plain MSE) or `"min_snr"` (Min-SNR-gamma,
            Hang et al., 2023). Defaults to `"none"`.
        min_snr_gamma: float, the gamma of Min-SNR weighting. Defaults to
            `5.0`.

    Example:

    ```python
    schedule = keras_diffusion.NoiseSchedule(
        1000, "cosine", prediction_type="v_prediction"
    )
    x_t = schedule.add_noise(x0, noise, t)
    ```

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
        - [Nichol & Dhariwal, 2021](https://arxiv.org/abs/2102.09672)
        - [Lin et al., 2024](https://arxiv.org/abs/2305.08891)
        - [Salimans & Ho, 2022](https://arxiv.org/abs/2202.00512)
        - [Hang et al., 2023](https://arxiv.org/abs/2303.09556)
    """

    name = "vp"
    sampler_family = "vp"
    prediction_types = PREDICTION_TYPES
    loss_weightings = ("none", "min_snr")
    settings = (
        Setting("beta_schedule", str, "linear", BETA_SCHEDULES, "its betas"),
        Setting(
            "timesteps",
            int,
            1000,
            help="T, diffusion steps (flow: the network gets s * T)",
            argument="num_train_timesteps",
        ),
        Setting(
            "beta_start",
            float,
            1e-4,
            help="the first beta (linear: 1e-4 x 1000 / T; not read by cosine)",
        ),
        Setting(
            "beta_end",
            float,
            0.02,
            help="the last beta (linear: 0.02 x 1000 / T; not read by cosine)",
        ),
        # The objective's: checked on every process (`check_objective`), set on
        # the schedule by `with_objective`.
        Setting(
            "prediction_type",
            str,
            "epsilon",
            PREDICTION_TYPES,
            "what the U-Net predicts",
            objective=True,
        ),
        Setting(
            "loss_weighting",
            str,
            "none",
            ("none", "min_snr"),
            "min_snr: Min-SNR-gamma loss weights",
            objective=True,
        ),
        Setting(
            "min_snr_gamma",
            float,
            5.0,
            help="the gamma of Min-SNR weighting (read with --loss-weighting min_snr)",
            objective=True,
        ),
    )
    has_terminal_check = True
    network_inputs = "VP timesteps 0 to T-1 on x_t"
    # Each instance holds its own (the constructor's argument).
    prediction_type = vp_objective.DEFAULTS["prediction_type"]

    def __init__(
        self,
        num_train_timesteps=1000,
        beta_schedule="linear",
        beta_start=1e-4,
        beta_end=0.02,
        rescale_zero_terminal_snr=False,
        trained_betas=None,
        prediction_type="epsilon",
        loss_weighting="none",
        min_snr_gamma=5.0,
    ):
        check_int("num_train_timesteps", num_train_timesteps, minimum=2)
        check_choice("beta_schedule", beta_schedule, BETA_SCHEDULES)
        for name, value in (("beta_start", beta_start), ("beta_end", beta_end)):
            check_float(name, value, greater_than=0.0, less_than=1.0)
        if beta_start > beta_end and beta_schedule in ("linear", "scaled_linear"):
            raise ValueError(
                "Argument `beta_start` must not exceed `beta_end`. "
                f"Received: beta_start={beta_start}, beta_end={beta_end}"
            )
        check_bool("rescale_zero_terminal_snr", rescale_zero_terminal_snr)
        trained_betas = check_trained_betas(trained_betas, num_train_timesteps)
        check_choice("prediction_type", prediction_type, PREDICTION_TYPES)
        check_choice("loss_weighting", loss_weighting, self.loss_weightings)
        check_float("min_snr_gamma", min_snr_gamma, greater_than=0.0)

        self.num_train_timesteps = int(num_train_timesteps)
        self.beta_schedule = beta_schedule
        self.beta_start = float(beta_start)
        self.beta_end = float(beta_end)
        self.rescale_zero_terminal_snr = bool(rescale_zero_terminal_snr)
        self.trained_betas = trained_betas
        self.prediction_type = prediction_type
        self.loss_weighting = loss_weighting
        self.min_snr_gamma = float(min_snr_gamma)

        betas = self._compute_betas()
        if self.rescale_zero_terminal_snr:
            betas = rescale_betas_zero_snr(betas)
        alphas_cumprod = np.cumprod(1.0 - betas)
        self.betas_float64 = betas
        self.alphas_cumprod_float64 = alphas_cumprod
        self.betas = betas.astype(np.float32)
        self.alphas_cumprod = alphas_cumprod.astype(np.float32)
        # Per-timestep tables of the tensor methods, formed in float64 (1 - abar
        # loses digits near t=0 in float32) and cast once.
        self._sqrt_alphas_cumprod = np.sqrt(alphas_cumprod).astype(np.float32)
        self._sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - alphas_cumprod).astype(
            np.float32
        )
        self._snr = (alphas_cumprod / np.maximum(1.0 - alphas_cumprod, 1e-20)).astype(
            np.float32
        )
        self._warn_objective()

    def _compute_betas(self):
        if self.trained_betas is not None:
            return np.asarray(self.trained_betas, dtype=np.float64)
        return named_betas(
            self.beta_schedule, self.num_train_timesteps, self.beta_start, self.beta_end
        )

    @property
    def final_alpha_cumprod(self):
        """alphas_cumprod at the last timestep: the signal a sampler starts from."""
        return float(self.alphas_cumprod_float64[-1])

    def run_values(self):
        """The run settings (`Process.run_values`), with `None` for the betas'
        ends where the beta schedule does not read them (cosine)."""
        values = super().run_values()
        if self.beta_schedule in ("cosine", "squaredcos_cap_v2"):
            values["beta_start"] = values["beta_end"] = None
        return values

    @property
    def terminal_signal(self):
        return self.final_alpha_cumprod

    def _check_t(self, t):
        """`t` as a tensor; concrete values outside [0, T - 1] are refused."""
        t = ops.convert_to_tensor(t)
        dtype = str(t.dtype)
        if "int" not in dtype and "float" not in dtype:
            raise TypeError(
                "Argument `t` must hold integer or float timesteps. "
                f"Received: t of dtype {dtype}"
            )
        if len(t.shape) != 1:
            raise ValueError(
                "Argument `t` must be a vector of shape (batch,). "
                f"Received: t of shape {tuple(t.shape)}"
            )
        if tf.executing_eagerly() and not isinstance(t, keras.KerasTensor):
            values = ops.convert_to_numpy(t)
            T = self.num_train_timesteps
            if values.size and not (
                np.all(np.isfinite(values))
                and values.min() >= 0
                and values.max() <= T - 1
            ):
                raise ValueError(
                    f"Argument `t` must lie in [0, {T - 1}] "
                    f"(num_train_timesteps={T}). Received: t in "
                    f"[{values.min()}, {values.max()}]"
                )
        return t

    def _gather(self, table, t):
        """Looks up a float32 table at a checked `t`; fractional `t` is
        linearly interpolated between neighbouring entries."""
        table = ops.convert_to_tensor(table)
        if "int" in str(t.dtype):
            return ops.take(table, ops.cast(t, "int32"))
        t = ops.clip(ops.cast(t, "float32"), 0.0, self.num_train_timesteps - 1.0)
        low = ops.floor(t)
        frac = t - low
        low = ops.cast(low, "int32")
        high = ops.minimum(low + 1, self.num_train_timesteps - 1)
        return (1.0 - frac) * ops.take(table, low) + frac * ops.take(table, high)

    def _check_pair(self, x0, noise, t):
        """`x0`, `noise` as float tensors of one shape, batch-matched with `t`."""
        x0 = ops.convert_to_tensor(x0)
        noise = ops.convert_to_tensor(noise)
        for name, value in (("x0", x0), ("noise", noise)):
            if "float" not in str(value.dtype):
                raise TypeError(
                    f"Argument `{name}` must be a float tensor. "
                    f"Received: {name} of dtype {value.dtype}"
                )
        if len(x0.shape) < 1 or tuple(x0.shape) != tuple(noise.shape):
            raise ValueError(
                "Arguments `x0` and `noise` must have one shape (batch, ...). "
                f"Received: x0.shape={tuple(x0.shape)}, "
                f"noise.shape={tuple(noise.shape)}"
            )
        t = self._check_t(t)
        if None not in (x0.shape[0], t.shape[0]) and x0.shape[0] != t.shape[0]:
            raise ValueError(
                f"Argument `t` must have one entry per example ({x0.shape[0]}). "
                f"Received: t of shape {tuple(t.shape)}"
            )
        return x0, noise, t

    def _coefficients(self, t, ndim):
        shape = (-1,) + (1,) * (ndim - 1)
        return (
            ops.reshape(self._gather(self._sqrt_alphas_cumprod, t), shape),
            ops.reshape(self._gather(self._sqrt_one_minus_alphas_cumprod, t), shape),
        )

    def add_noise(self, x0, noise, t):
        """Samples x_t ~ q(x_t | x_0): sqrt(abar_t) x0 + sqrt(1 - abar_t) noise.

        Args:
            x0: clean images, shape (batch, ...).
            noise: standard normal noise of the same shape.
            t: integer or float vector of shape (batch,).

        Returns:
            x_t, of the dtype of `x0`.
        """
        x0, noise, t = self._check_pair(x0, noise, t)
        signal, sigma = self._coefficients(t, len(x0.shape))
        out = signal * ops.cast(x0, "float32") + sigma * ops.cast(noise, "float32")
        return ops.cast(out, x0.dtype)

    def velocity(self, x0, noise, t):
        """The v-prediction target: sqrt(abar_t) noise - sqrt(1 - abar_t) x0.

        Reference: [Salimans & Ho, 2022](https://arxiv.org/abs/2202.00512).
        """
        x0, noise, t = self._check_pair(x0, noise, t)
        signal, sigma = self._coefficients(t, len(x0.shape))
        out = signal * ops.cast(noise, "float32") - sigma * ops.cast(x0, "float32")
        return ops.cast(out, x0.dtype)

    def snr(self, t):
        """Signal-to-noise ratio abar_t / (1 - abar_t), float32, shape (batch,)."""
        return self._gather(self._snr, self._check_t(t))

    def min_snr_weight(self, t, prediction_type, gamma):
        """Min-SNR-gamma (Hang et al., 2023): the weight min(snr, gamma) of the
        x0 loss, expressed for the loss of `prediction_type` at `t`."""
        return vp_objective.min_snr_weight(self.snr(t), prediction_type, gamma)

    def _warn_objective(self):
        """Warns that Min-SNR weighting gives the last timestep of a
        zero-terminal-SNR schedule no weight: min(snr, gamma) is 0 there, so
        the network never trains at the level sampling starts from."""
        if self.loss_weighting != "min_snr" or not self.rescale_zero_terminal_snr:
            return
        last = self.num_train_timesteps - 1
        weight = ops.convert_to_numpy(
            self.min_snr_weight([last], self.prediction_type, self.min_snr_gamma)
        )[0]
        vp_objective.warn_zero_terminal(
            last, weight, self.prediction_type, self.min_snr_gamma
        )

    def _set_objective(self, objective, replace):
        """A copy with the objective given set (`Process.with_objective`);
        itself where it holds that objective already."""
        config = self.get_config()
        given = vp_objective.changes(config, replace, **objective)
        return type(self).from_config({**config, **given}) if given else self

    def training_loss(self, step):
        """t ~ U{0, ..., T-1}, x_t = `add_noise(x0, noise, t)`, the denoiser
        called on `[x_t, t]` (plus labels) and the MSE to the target of
        `prediction_type`, Min-SNR weighted when `loss_weighting` is
        `"min_snr"`; float32, also under mixed precision (see
        `Process.training_loss`)."""
        prediction_type = self.prediction_type
        x0, noise = step.x0, step.noise()
        # Integer and `stateless` draws: the same numbers with or without XLA.
        t = tf.random.stateless_uniform(
            [step.batch_size],
            seed=step.seeds[0],
            minval=0,
            maxval=self.num_train_timesteps,
            dtype="int32",
            alg="philox",
        )
        prediction = step.network(self.add_noise(x0, noise, t), ops.cast(t, "float32"))
        if prediction_type == "epsilon":
            target = noise
        elif prediction_type == "v_prediction":
            target = self.velocity(x0, noise, t)
        else:
            target = x0
        per_example = step.mean_square(prediction - target)
        if self.loss_weighting == "min_snr":
            weight = self.min_snr_weight(t, prediction_type, self.min_snr_gamma)
            per_example = per_example * weight
        return ops.mean(per_example)

    def sampling_levels(self, spacing):
        """The sigmas sqrt((1 - abar) / abar) at diffusers' timesteps of a
        sampler's `Spacing` (`schedules.vp_sampling`)."""
        return vp_sampling.sampling_levels(self, spacing)

    def output_tables(self, plan, prediction_type):
        """The reading of a VP plan (see `Process.output_tables`): its `t`,
        `alpha` and `sigma` (the levels the output is read at) and `scale`
        (the sampler's state x is `scale` times x_t)."""
        alpha, sigma, k = plan["alpha"], plan["sigma"], plan["scale"]
        conv = vp_objective.output_coefficients(prediction_type, alpha, sigma, k)
        tables = dict(zip(("x0_x", "x0_out", "eps_x", "eps_out"), conv, strict=True))
        tables["t"] = np.asarray(plan["t"], np.float64)
        tables["in_scale"] = 1.0 / k
        # The state x = k x_t = k alpha x0 + k sigma eps.
        tables["a_state"], tables["s_state"] = k * alpha, k * sigma
        return tables
