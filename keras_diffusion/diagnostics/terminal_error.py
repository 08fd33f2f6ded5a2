"""Will sampling work? The denoiser's error at the highest timesteps, measured.

Sampling starts from pure noise at the last timesteps, where a model must
predict the clean image from (almost) nothing. The best it can do there is
the data's mean, so its x0 estimate's mean squared error is about the data's
per-pixel variance: a trained model scores an x0 MSE over the data variance
(`ratio`) of about 1. An undertrained one scores far more, and the samplers
turn that into samples of pure noise.

Epsilon prediction makes this worse: the x0 estimate is
`(x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t)`, so an epsilon error is
multiplied by `(1 - abar_t) / abar_t` in x0 MSE. On a linear schedule of
300 steps `abar[-1] = 3.4e-5`: an epsilon MSE of 0.127 (what a 20-epoch
emoji run reached) is an x0 MSE of 3,700. V-prediction's x0 error at the
last timestep is its own error, not an amplified one.

Measured on one held-out batch of 64, EMA weights (a U-Net of widths 16, 32
trained on 1,024 16x16 images of coloured shapes, batch 64, EMA 0.999; the
samples judged by `folder_quality`, DDIM-50, against 300 held-out shapes):

| setting (T=300)              | steps     | ratio          | samples' FD/floor |
|------------------------------|-----------|----------------|-------------------|
| epsilon, linear, lr 2e-4     | 50-1000   | 110,000-3,800  | 73-66 (noise)     |
| epsilon, linear, lr 2e-3     | 50-1000   | 9,900-410      | 65-38 (noise)     |
| v-prediction, cosine, 2e-4   | 50-1000   | 1.9-1.2        | 19-2.3            |
| v-prediction, cosine, 2e-3   | 50-1000   | 1.1            | 10.5-1.7          |

The digits preset after its 25 epochs (v-prediction, cosine, T=1000): 0.64.
A denoiser that knows the answer: 0. So `THRESHOLD = 10` (the x0 MSE ten
times what predicting the data's mean costs): a ratio above it warns, 8x
above the trained figures and 40x below the least failing one. The check
catches this failure, the one of the highest timesteps; a model that passes
it can still be undertrained below them (the v-prediction rows at 50 steps).

`SamplingCheck` is the callback that measures it during `fit`;
`keras_diffusion.run.training.train` runs it on a training batch (64 images) at
the end of the run and at each periodic sample grid: about a second on two
CPU cores for the "tiny" U-Net at 32x32, less than one training step.

Example:

```python
from keras_diffusion.diagnostics import measure_terminal_error

batch = next(iter(dataset))
result = measure_terminal_error(model, batch)
print(result.summary())
if not result.ok:
    print(result.warning())
```
"""

import dataclasses
import warnings

import keras
import numpy as np

from keras_diffusion.utils.checks import check_float, check_int

# The share of timesteps, from the last, that is measured.
TOP_FRACTION = 0.02
# x0 MSE over the data's per-pixel variance above which sampling is likely
# to give noise: a trained model is at about 1 or below.
THRESHOLD = 10.0
# The data variance's floor, so that near-constant data gives a finite ratio.
MIN_VARIANCE = 1e-2


def top_timesteps(num_train_timesteps, fraction=TOP_FRACTION, count=4):
    """Up to `count` timesteps spread over the last `fraction`, with T - 1."""
    T = check_int("num_train_timesteps", num_train_timesteps, 1)
    span = max(1, int(round(T * fraction)))
    steps = np.linspace(T - span, T - 1, count).round().astype(np.int64)
    return tuple(int(t) for t in np.unique(steps))


@dataclasses.dataclass
class TerminalError:
    """What `measure_terminal_error` measured (see the module).

    Attributes:
        timesteps: the timesteps measured (each image of the batch at one).
        prediction_type: the model's (its schedule's).
        beta_schedule: the name of the model's schedule.
        final_alpha_cumprod: float, the schedule's `alphas_cumprod[-1]`.
        target_mse: float, the MSE of the prediction type's target there
            (the training loss at those timesteps).
        epsilon_mse: float, the implied epsilon estimate's MSE.
        x0_mse: float, the implied x0 estimate's MSE.
        data_variance: float, the batch's per-pixel variance.
        live_x0_mse: float or `None`, `x0_mse` with the live weights when the
            model has an EMA (measured is the EMA, which sampling uses).
        threshold: float, the `ratio` above which `ok` is False.
    """

    timesteps: tuple
    prediction_type: str
    beta_schedule: str
    final_alpha_cumprod: float
    target_mse: float
    epsilon_mse: float
    x0_mse: float
    data_variance: float
    live_x0_mse: float | None = None
    threshold: float = THRESHOLD

    @property
    def ratio(self):
        """x0 MSE over the data variance (floored at `MIN_VARIANCE`)."""
        return self.x0_mse / max(self.data_variance, MIN_VARIANCE)

    @property
    def ok(self):
        return bool(self.ratio <= self.threshold)

    def summary(self):
        """One line of the figures."""
        steps = f"t={self.timesteps[0]}..{self.timesteps[-1]}"
        errors = f"{self.prediction_type} MSE {self.target_mse:.3g}"
        if self.prediction_type != "epsilon":
            errors += f", epsilon MSE {self.epsilon_mse:.3g}"
        return (
            f"x0 MSE {self.x0_mse:.3g} at {steps}, {self.ratio:.3g}x the data "
            f"variance {self.data_variance:.3g} ({errors})"
        )

    def warning(self, steps=None, learning_rate=None):
        """The one-line warning, with the likely causes; `None` when `ok`.

        Args:
            steps: int, optimizer steps taken so far, if known.
            learning_rate: float, the (peak) learning rate, if known.
        """
        if self.ok:
            return None
        causes = []
        training = "too few steps for the learning rate"
        if steps is not None:
            rate = "" if learning_rate is None else f" at lr {learning_rate:.3g}"
            training += f" ({steps} steps{rate})"
        causes.append(training)
        live = self.live_x0_mse
        if live is not None and live / max(self.data_variance, MIN_VARIANCE) <= (
            self.threshold
        ):
            causes.append(
                f"the EMA lags the live weights (x0 MSE {live:.3g}): a lower ema_decay"
            )
        if self.prediction_type == "epsilon":
            abar = self.final_alpha_cumprod
            gain = (1.0 - abar) / max(abar, 1e-12)
            causes.append(
                f"epsilon prediction on a {self.beta_schedule} schedule, whose "
                f"last timestep multiplies the epsilon MSE by (1 - abar) / abar "
                f"= {gain:.3g} in x0: try prediction_type='v_prediction' with "
                "beta_schedule='cosine'"
            )
        return (
            f"Sampling will likely give noise: the denoiser is far from trained "
            f"at the highest timesteps ({self.summary()}; a trained model is "
            f"near 1x, this warns above {self.threshold:g}x). Likely causes: "
            f"{'; '.join(causes)}."
        )


def _x0_and_epsilon(prediction_type, prediction, x_t, signal, sigma):
    if prediction_type == "epsilon":
        return (x_t - sigma * prediction) / signal, prediction
    if prediction_type == "v_prediction":
        return signal * x_t - sigma * prediction, sigma * x_t + signal * prediction
    return prediction, (x_t - signal * prediction) / sigma


def _target(prediction_type, x0, noise, signal, sigma):
    if prediction_type == "epsilon":
        return noise
    if prediction_type == "v_prediction":
        return signal * noise - sigma * x0
    return x0


def measure_terminal_error(
    model, batch, fraction=TOP_FRACTION, seed=0, threshold=THRESHOLD
):
    """Measures a model's denoising error at its highest timesteps.

    One forward pass of the batch (two with an EMA: EMA and live weights),
    each image noised at one of `top_timesteps` from a fixed seed.

    Args:
        model: a `DiffusionModel`.
        batch: images in [-1, 1] `(n, H, W, C)` (n >= 2), or `(images,
            labels)` for a conditional model; held-out images where there
            are some, else a training batch.
        fraction: float in (0, 1], the share of timesteps measured, from the
            last. Defaults to `0.02`.
        seed: int, the noise. Defaults to `0`.
        threshold: float, see `TerminalError`. Defaults to `10.0`.

    Returns:
        `TerminalError`.
    """
    schedule = getattr(model, "schedule", None)
    if not getattr(schedule, "has_terminal_check", False):
        raise ValueError(
            "measure_terminal_error reads a VP process's highest timesteps; "
            "it does not apply to this model's process (an EDMSchedule or "
            f"FlowMatchSchedule, ...). Received: schedule={schedule!r}"
        )
    fraction = check_float("fraction", fraction, greater_than=0.0, maximum=1.0)
    seed = check_int("seed", seed, 0)
    threshold = check_float("threshold", threshold, greater_than=0.0)
    images, labels = batch if isinstance(batch, (tuple, list)) else (batch, None)
    images = np.asarray(images, np.float32)
    if getattr(model, "autoencoder", None) is not None:
        import tensorflow as tf

        # Posterior moments, as training feeds them, to latents.
        images = np.asarray(model._latents(images, tf.constant([seed, 1], "int32")))
    shape = tuple(getattr(model, "image_shape", ()))
    if images.ndim != 4 or images.shape[1:] != shape or len(images) < 2:
        raise ValueError(
            f"Argument `batch` must hold at least 2 images of shape {shape}. "
            f"Received: images of shape {images.shape}"
        )
    if getattr(model, "conditional", False) and labels is None:
        raise ValueError(
            "Argument `batch` must be `(images, labels)` for a conditional "
            "model. Received: images only"
        )
    schedule = model.schedule
    timesteps = top_timesteps(schedule.num_train_timesteps, fraction)
    t = np.resize(np.asarray(timesteps), len(images))
    abar = np.asarray(schedule.alphas_cumprod, np.float64)[t].reshape(-1, 1, 1, 1)
    signal, sigma = np.sqrt(abar), np.sqrt(1.0 - abar)
    x0 = images.astype(np.float64)
    noise = np.random.default_rng(seed).standard_normal(x0.shape)
    x_t = signal * x0 + sigma * noise
    kind = schedule.prediction_type

    def x0_error(use_ema):
        # The denoiser's third input: labels, or a text model's captions
        # encoded (with the EMA's encoder where the denoiser has its EMA).
        condition = None if labels is None else model.encode_condition(labels, use_ema)
        prediction = model.denoise(
            x_t.astype(np.float32), t.astype(np.float32), condition, use_ema=use_ema
        )
        prediction = np.asarray(prediction, np.float64)
        x0_hat, eps_hat = _x0_and_epsilon(kind, prediction, x_t, signal, sigma)
        target = _target(kind, x0, noise, signal, sigma)
        return (
            float(np.mean((x0_hat - x0) ** 2)),
            float(np.mean((prediction - target) ** 2)),
            float(np.mean((eps_hat - noise) ** 2)),
        )

    x0_mse, target_mse, epsilon_mse = x0_error(use_ema=True)
    live = x0_error(use_ema=False)[0] if model.ema is not None else None
    return TerminalError(
        timesteps=timesteps,
        prediction_type=kind,
        beta_schedule=str(getattr(schedule, "beta_schedule", type(schedule).__name__)),
        final_alpha_cumprod=float(schedule.alphas_cumprod[-1]),
        target_mse=target_mse,
        epsilon_mse=epsilon_mse,
        x0_mse=x0_mse,
        data_variance=float(np.mean(np.var(x0, axis=0))),
        live_x0_mse=live,
        threshold=threshold,
    )


def _peak_learning_rate(optimizer):
    """The learning rate, or a schedule's highest (a decay ends near 0)."""
    rate = optimizer.get_config().get("learning_rate")
    if isinstance(rate, dict):
        config = rate.get("config", {})
        peaks = [config.get(k) for k in ("initial_learning_rate", "warmup_target")]
        peaks = [float(p) for p in peaks if isinstance(p, (int, float))]
        return max(peaks) if peaks else None
    return None if rate is None else float(rate)


class SamplingCheck(keras.callbacks.Callback):
    """Warns, in one line, when the model's samples will likely be noise.

    Runs `measure_terminal_error` on a fixed batch at the end of `fit` and,
    with `every`, after every `every`-th epoch; each time the model is far
    from trained at the highest timesteps it emits `TerminalError.warning`.
    It costs two forward passes of the batch (up to 64 images).

    Args:
        batch: images `(n, H, W, C)` in [-1, 1], or `(images, labels)`:
            held-out images where there are some, else a training batch.
        every: int or `None`: also check after every `every`-th epoch.
            Defaults to `None` (at the end only).
        log: callable taking the message, or `None` for `warnings.warn`.
            Defaults to `None`.
        threshold: float, see `TerminalError`. Defaults to `10.0`.

    Attributes:
        result: the last `TerminalError`, or `None` before the first check.

    Example:

    ```python
    batch = next(iter(dataset))
    model.fit(dataset, epochs=5, callbacks=[SamplingCheck(batch)])
    ```
    """

    def __init__(self, batch, every=None, log=None, threshold=THRESHOLD):
        super().__init__()
        if every is not None:
            check_int("every", every, 1)
        self.threshold = check_float("threshold", threshold, greater_than=0.0)
        if isinstance(batch, (tuple, list)):
            images, labels = batch
            self.batch = (np.asarray(images)[:64], np.asarray(labels)[:64])
        else:
            self.batch = np.asarray(batch)[:64]
        self.every = every
        self.log = log
        self.result = None
        self._checked_at = None  # the optimizer step of the last check

    def check(self):
        """Measures now; emits the warning when far from trained. Returns
        the `TerminalError`."""
        self.result = measure_terminal_error(
            self.model, self.batch, threshold=self.threshold
        )
        steps, learning_rate = self._progress()
        self._checked_at = steps
        message = self.result.warning(steps, learning_rate)
        if message is not None:
            if self.log is None:
                warnings.warn(message, stacklevel=2)
            else:
                self.log(message)
        return self.result

    def _progress(self):
        """`(steps, peak learning rate)` of the model's optimizer, or `None`s."""
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return None, None
        steps = int(keras.ops.convert_to_numpy(optimizer.iterations))
        return steps, _peak_learning_rate(optimizer)

    def on_epoch_end(self, epoch, logs=None):
        if self.every is not None and (epoch + 1) % self.every == 0:
            self.check()

    def on_train_end(self, logs=None):
        # Checked after the last epoch already: say it once.
        if self.result is None or self._progress()[0] != self._checked_at:
            self.check()
