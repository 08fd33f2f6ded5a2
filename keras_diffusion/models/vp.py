"""Variance-preserving training maths: the loss of each prediction type.

t ~ U{0, ..., T-1}, x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise
(`NoiseSchedule.add_noise`), the denoiser called on `[x_t, t]` (plus labels),
and the MSE to the target of `prediction_type`, optionally Min-SNR weighted
(Hang et al., 2023). Everything is float32, also under mixed precision.
"""

import tensorflow as tf
from keras import ops

from keras_diffusion.utils import stateless


def min_snr_weight(schedule, t, prediction_type, gamma):
    """Min-SNR-gamma: the weight min(snr, gamma) of the x0 loss, expressed for
    the loss of `prediction_type` at timesteps `t`."""
    snr = schedule.snr(t)
    clipped = ops.minimum(snr, gamma)
    if prediction_type == "epsilon":
        return clipped / ops.maximum(snr, 1e-8)
    if prediction_type == "v_prediction":
        return clipped / (snr + 1.0)
    return clipped


def loss(call_denoiser, schedule, x0, labels, seeds, training, prediction_type, gamma):
    """The mean (weighted) denoising loss of a batch of clean samples `x0`.

    Args:
        call_denoiser: callable `(inputs, training) -> prediction`.
        schedule: the `NoiseSchedule`.
        x0: float32 tensor `(batch, H, W, C)`.
        labels: int32 labels `(batch,)` (dropout already applied) or `None`.
        seeds: the stateless seeds `(timesteps, noise)`.
        training: bool, passed to the denoiser.
        prediction_type: `"epsilon"`, `"v_prediction"` or `"sample"`.
        gamma: the Min-SNR gamma, or `None` for the plain MSE.
    """
    t_seed, noise_seed = seeds
    T = schedule.num_train_timesteps
    # Integer and `stateless` draws: the same numbers with or without XLA.
    t = tf.random.stateless_uniform(
        [ops.shape(x0)[0]],
        seed=t_seed,
        minval=0,
        maxval=T,
        dtype="int32",
        alg="philox",
    )
    noise = stateless.normal(ops.shape(x0), noise_seed)
    inputs = [schedule.add_noise(x0, noise, t), ops.cast(t, "float32")]
    if labels is not None:
        inputs.append(labels)
    prediction = ops.cast(call_denoiser(inputs, training), "float32")
    if prediction_type == "epsilon":
        target = noise
    elif prediction_type == "v_prediction":
        target = schedule.velocity(x0, noise, t)
    else:
        target = x0
    axes = tuple(range(1, len(x0.shape)))
    per_example = ops.mean(ops.square(prediction - target), axis=axes)
    if gamma is not None:
        per_example = per_example * min_snr_weight(schedule, t, prediction_type, gamma)
    return ops.mean(per_example)
