"""Flow-matching training maths: the velocity loss, on the device.

Esser et al. (2024), as Stable Diffusion 3 trains: u is drawn by the
schedule's `timestep_sampling` and shifted to the noise level s, x_s =
(1 - s) x0 + s noise, the network is called with `s * T` (diffusers'
timestep) and the loss is the unweighted MSE to the velocity noise - x0.
Everything is float32, also under mixed precision.
"""

import math

from keras import ops

from keras_diffusion.utils import stateless


def draw_levels(schedule, batch, seed):
    """Training noise levels s in [0, 1), shape (batch,): `timestep_sampling`
    draws u, which the schedule's shift maps to s."""
    if schedule.timestep_sampling == "logit_normal":
        n = stateless.normal([batch], seed)
        u = ops.sigmoid(schedule.logit_mean + schedule.logit_std * n)
    else:
        u = stateless.uniform([batch], seed)
        if schedule.timestep_sampling == "mode":
            # SD3's mode sampling (diffusers' compute_density_for_timestep_sampling).
            bend = ops.square(ops.cos(0.5 * math.pi * u)) - 1.0 + u
            u = 1.0 - u - schedule.mode_scale * bend
    shift = schedule.shift
    return shift * u / (1.0 + (shift - 1.0) * u)


def loss(call_denoiser, schedule, x0, labels, level_seed, noise_seed, training):
    """The mean flow-matching loss of a batch of clean samples `x0` (float32).

    Args:
        call_denoiser: callable `(inputs, training) -> velocity`.
        schedule: the `FlowMatchSchedule`.
        x0: float32 tensor `(batch, H, W, C)`.
        labels: int32 labels `(batch,)` (dropout already applied) or `None`.
        level_seed, noise_seed: stateless seeds of the noise levels and noise.
        training: bool, passed to the denoiser.
    """
    batch = ops.shape(x0)[0]
    s = draw_levels(schedule, batch, level_seed)
    noise = stateless.normal(ops.shape(x0), noise_seed)
    s_b = ops.reshape(s, (-1,) + (1,) * (len(x0.shape) - 1))
    inputs = [(1.0 - s_b) * x0 + s_b * noise, s * schedule.num_train_timesteps]
    if labels is not None:
        inputs.append(labels)
    velocity = ops.cast(call_denoiser(inputs, training), "float32")
    axes = tuple(range(1, len(x0.shape)))
    return ops.mean(ops.mean(ops.square(velocity - (noise - x0)), axis=axes))
