"""One trial of one side of the peer comparison, in a process of its own.

    python -m benchmarks.peer_jobs JOB.json SIDE

reads the job `benchmarks.peer_compare` wrote, builds SIDE's trainer and
sampler (importing only SIDE's framework), times them and prints the result
as one JSON line. The protocol is the same for every side: a warm-up call
of `steps` training steps (reported: tracing or XLA's compilation, or
oneDNN's first primitives), one timed call of `steps` steps; then one warm-up and
one timed sampling call. Keras's sampling warm-up is a whole `generate`
call (it traces the loop that the timed call runs), torch's a two-step
pipeline call (eager: nothing to trace).

Peak memory is the process's peak resident set size, `VmHWM`: reset after
training, so the sampling figure is the peak while sampling, with what the
process then held (the trained model, its optimizer, the framework). On a
GPU the device allocator's peak is reported too, reset the same way.
`ru_maxrss` is not used: a child's starts at its parent's size (it is kept
across `exec`).
"""

import json
import os
import sys
import time

import numpy as np

SIDES = {
    "keras": "Keras: DiffusionModel.fit, compile defaults",
    "keras-xla": "Keras: fit, jit_compile=True",
    "keras-graph": "Keras: fit, jit_compile=False",
    "keras-mixed": "Keras: fit, mixed precision + XLA",
    "torch": "PyTorch + diffusers, float32",
    "torch-amp": "PyTorch + diffusers, autocast",
}


def peak_rss_mib(reset=False):
    """The process's peak resident set size in MiB; `reset` starts it anew."""
    try:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmHWM:"))
    except OSError:  # not Linux: ru_maxrss (which counts the parent's)
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**20 if sys.platform == "darwin" else 2**10)
    if reset:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    return int(line.split()[1]) / 2**10


def keras_side(job, side, images):
    """`(train, sample, device_peak, settings)` of a Keras side: `fit`."""
    import tensorflow as tf

    from benchmarks.config import build_unet
    from benchmarks.device import select_device
    from benchmarks.loops import FitLoop
    from keras_diffusion.samplers import DDIMSampler

    gpu = select_device("gpu" if job["gpu"] else "cpu")
    tf.config.threading.set_intra_op_parallelism_threads(job["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(job["threads"])
    mixed = side == "keras-mixed" and ("mixed_float16" if gpu else "mixed_bfloat16")
    unet, schedule = build_unet(job["model"], mixed=mixed)
    # "keras" passes no speed flag: it measures the library's defaults.
    compile_flags = {} if side == "keras" else {"jit_compile": side != "keras-graph"}
    loop = FitLoop(
        unet,
        schedule,
        images,
        job["batch_size"],
        job["learning_rate"],
        job["ema"],
        # Every `train` call below fits `steps` steps: the XLA choice is
        # measured at the steps a call they run.
        epoch_steps=job["steps"],
        **compile_flags,
    )
    sampler = DDIMSampler(num_steps=job["sampling_steps"])

    def sample(warm_up=False):
        start = time.perf_counter()
        num = job["sampling_images"]
        loop.model.generate(num, sampler=sampler, seed=0, verbose=0)
        return time.perf_counter() - start

    def device_peak(reset=False):
        if not gpu:
            return 0
        peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
        if reset:
            tf.config.experimental.reset_memory_stats("GPU:0")
        return peak

    # What the defaults resolved to: read after compile, and
    # steps_per_execution ("auto" until then) after each training call.
    settings = {
        "threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "jit_compile": loop.model.jit_compile,
        "dtype_policy": unet.dtype_policy.name,
    }

    def train(steps):
        seconds = loop.run(steps)
        settings["steps_per_execution"] = loop.model.steps_per_execution
        return seconds

    return train, sample, device_peak, settings


def torch_side(job, side, images):
    """`(train, sample, device_peak, settings)` of a torch side."""
    import torch

    from benchmarks import peer

    torch.set_num_threads(job["threads"])
    torch.set_num_interop_threads(job["threads"])
    device = "cuda" if job["gpu"] else "cpu"
    unet = peer.diffusers_unet(job["unet"])
    peer.check_parameters(unet, job["parameters"])
    trainer = peer.TorchTrainer(
        unet.to(device),
        job["schedule"],
        images,
        job["batch_size"],
        job["learning_rate"],
        job["ema_decay"] if job["ema"] else None,
        device,
        amp=side == "torch-amp",
    )
    sampler = peer.TorchSampler(trainer, job["sampling_images"], job["sampling_steps"])

    def device_peak(reset=False):
        if not job["gpu"]:
            return 0
        peak = torch.cuda.max_memory_allocated()
        if reset:
            torch.cuda.reset_peak_memory_stats()
        return peak

    settings = {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "autocast": side == "torch-amp",
    }
    return trainer.run, sampler.run, device_peak, settings


def run_job(job, side):
    """Times one side as the module docstring says; returns a dict."""
    if side not in SIDES:
        raise ValueError(f"Unknown side {side!r}; choose from {', '.join(SIDES)}")
    images = np.load(job["images"])
    build = torch_side if side.startswith("torch") else keras_side
    load = os.getloadavg()[0]
    train, sample, device_peak, settings = build(job, side, images)
    result = {"side": side, "settings": settings}
    if job["training"]:
        # The warm-up trains as many steps as the timed call: a fit of fewer
        # would run fewer steps a compiled call ("auto" divides the epoch),
        # and the timed call would pay XLA's compilation of the other.
        first = train(job["steps"])
        seconds = train(job["steps"])
        result["training"] = {
            "images_per_sec": job["steps"] * job["batch_size"] / seconds,
            "first_call_s": first,
            "peak_rss_mib": peak_rss_mib(reset=True),
            "peak_device_mib": device_peak(reset=True) / 2**20,
        }
    if job["sampling"]:
        first = sample(warm_up=True)
        seconds = sample()
        result["sampling"] = {
            "images_per_sec": job["sampling_images"] / seconds,
            "first_call_s": first,
            "peak_rss_mib": peak_rss_mib(),
            "peak_device_mib": device_peak() / 2**20,
        }
    # Other processes' load, as 1-minute averages: at the start and the end.
    result["load"] = [load, os.getloadavg()[0]]
    return result


def main(argv=None):
    path, side = (argv or sys.argv[1:])[:2]
    with open(path) as f:
        job = json.load(f)
    print(json.dumps(run_job(job, side)), flush=True)


if __name__ == "__main__":
    main()
