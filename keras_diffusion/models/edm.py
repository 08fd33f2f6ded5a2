"""EDM training maths: the preconditioned denoising loss, on the device.

Karras et al. (2022), Table 1 and eq. (8): sigma = exp(p_mean + p_std * n),
x = x0 + sigma * noise, the network F is called on `c_in * x` and
`c_noise`, the denoiser is D = c_skip * x + c_out * F and the loss is
lambda(sigma) * ||D - x0||**2 with lambda = (sigma**2 + sigma_data**2) /
(sigma * sigma_data)**2. Everything is float32, also under mixed precision.
"""

from keras import ops

from keras_diffusion.utils import stateless


def draw_sigmas(schedule, batch, seed):
    """Training noise levels, log-normal: exp(p_mean + p_std * n), shape (batch,)."""
    n = stateless.normal([batch], seed)
    return ops.exp(schedule.p_mean + schedule.p_std * n)


def preconditioning(schedule, sigma):
    """`c_skip`, `c_out`, `c_in`, `c_noise` of float32 `sigma`, elementwise."""
    sigma = ops.cast(sigma, "float32")
    sd = schedule.sigma_data
    total = ops.square(sigma) + sd**2
    c_skip = sd**2 / total
    c_out = sigma * sd / ops.sqrt(total)
    c_in = 1.0 / ops.sqrt(total)
    c_noise = 0.25 * ops.log(sigma)
    return c_skip, c_out, c_in, c_noise


def loss(call_denoiser, schedule, x0, labels, sigma_seed, noise_seed, training):
    """The mean EDM loss of a batch of clean samples `x0` (float32).

    Args:
        call_denoiser: callable `(inputs, training) -> F`.
        schedule: the `EDMSchedule`.
        x0: float32 tensor `(batch, H, W, C)`.
        labels: int32 labels `(batch,)` (dropout already applied) or `None`.
        sigma_seed, noise_seed: stateless seeds of the noise levels and noise.
        training: bool, passed to the denoiser.
    """
    batch = ops.shape(x0)[0]
    sigma = draw_sigmas(schedule, batch, sigma_seed)
    noise = stateless.normal(ops.shape(x0), noise_seed)
    broadcast = (-1,) + (1,) * (len(x0.shape) - 1)
    c_skip, c_out, c_in, c_noise = preconditioning(schedule, sigma)
    c_skip, c_out, c_in = (ops.reshape(c, broadcast) for c in (c_skip, c_out, c_in))
    x = x0 + ops.reshape(sigma, broadcast) * noise
    inputs = [c_in * x, c_noise]
    if labels is not None:
        inputs.append(labels)
    out = ops.cast(call_denoiser(inputs, training), "float32")
    # lambda ||D - x0||^2 with D = c_skip x + c_out F equals ||F - target||^2
    # for target = (x0 - c_skip x) / c_out, as lambda c_out^2 = 1; this form
    # does not subtract nearly equal D and x0 at small sigma.
    target = (x0 - c_skip * x) / c_out
    axes = tuple(range(1, len(x0.shape)))
    return ops.mean(ops.mean(ops.square(out - target), axis=axes))
