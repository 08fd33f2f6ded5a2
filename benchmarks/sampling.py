"""The sampling benchmark: `generate`'s compiled loop vs Python loops.

The same DDIM (eta=0) run three ways: `DiffusionModel.generate` (one
compiled loop), a NumPy loop calling the denoiser directly each step, and
the same loop calling `predict` each step.
"""

import time

import numpy as np

from benchmarks.config import build_unet, image_size
from benchmarks.train_benchmark import median_ratio, rotated
from keras_diffusion.models import DiffusionModel
from keras_diffusion.samplers import DDIMSampler


def ddim_python_loop(call, model, sampler, x_T):
    """DDIM (eta=0) in NumPy, one denoiser call a step."""
    abar = model.schedule.alphas_cumprod.astype(np.float64)
    timesteps = sampler.timesteps(model.schedule)
    x = x_T
    for i, t in enumerate(timesteps):
        a = abar[int(t)]
        a_prev = abar[int(timesteps[i + 1])] if i + 1 < len(timesteps) else 1.0
        t_vec = np.full((len(x),), t, np.float32)
        eps = np.asarray(call(x, t_vec), np.float64)
        x0 = (x - np.sqrt(1.0 - a) * eps) / np.sqrt(a)
        x = (np.sqrt(a_prev) * x0 + np.sqrt(1.0 - a_prev) * eps).astype(np.float32)
    return x


def benchmark_sampling(config, log):
    """Images/s of the three ways, medians over interleaved trials; a dict.

    Args:
        config: a `BenchmarkConfig` (`quick`, `sampling_*`).
        log: callable taking one message string.
    """
    name = "tiny" if config.quick else "small"
    unet, schedule = build_unet(name)
    model = DiffusionModel(unet, schedule=schedule, seed=0)
    steps = 5 if config.quick else config.sampling_steps
    trials = 2 if config.quick else config.sampling_trials
    num = config.sampling_images
    sampler = DDIMSampler(num_steps=steps)
    size = image_size(name)
    x_T = np.random.default_rng(0).standard_normal((num, size, size, 1))
    x_T = x_T.astype(np.float32)
    runs = {
        "generate": lambda: model.generate(num, sampler=sampler, seed=0, verbose=0),
        "direct_call": lambda: ddim_python_loop(
            lambda x, t: unet([x, t], training=False), model, sampler, x_T
        ),
        "predict": lambda: ddim_python_loop(
            lambda x, t: unet.predict([x, t], verbose=0, batch_size=num),
            model,
            sampler,
            x_T,
        ),
    }
    for run in runs.values():
        run()
    rates = {key: [] for key in runs}
    for trial in range(trials):
        for key in rotated(runs, trial):
            start = time.perf_counter()
            runs[key]()
            rates[key].append(num / (time.perf_counter() - start))
    result = {
        "model": name,
        "num_images": num,
        "num_steps": steps,
        "trials": trials,
        "images_per_sec": {k: float(np.median(v)) for k, v in rates.items()},
        "generate_vs_direct_call": median_ratio(
            rates["generate"], rates["direct_call"]
        ),
        "generate_vs_predict": median_ratio(rates["generate"], rates["predict"]),
    }
    log(
        f"\n== sampling: {num} images {size}x{size}, DDIM {steps} steps\n"
        + "\n".join(
            f"  {k:12s} {v:9.1f} images/s" for k, v in result["images_per_sec"].items()
        )
        + f"\n  generate / direct call: {result['generate_vs_direct_call']:.2f}x"
        + f"\n  generate / predict:     {result['generate_vs_predict']:.2f}x"
    )
    return result
