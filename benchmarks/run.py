"""A whole benchmark run: the environment, and what `config` asks (the device
is chosen before, by `benchmarks.device.select_device`)."""

import os
import platform
import sys
import time

import keras
import tensorflow as tf

from benchmarks.components import format_components, run_components
from benchmarks.config import TINY_UNET
from benchmarks.peer_compare import missing_peer, peer_environment, run_peer
from benchmarks.sampling import benchmark_sampling
from benchmarks.train_benchmark import (
    benchmark_training,
    format_table,
)
from keras_diffusion import data as data_lib
from keras_diffusion import diagnostics
from keras_diffusion.models import DiffusionModel, UNet
from keras_diffusion.schedules.noise_schedule import NoiseSchedule


def environment():
    """`diagnostics.environment_report()` with the machine, Python and date."""
    env = diagnostics.environment_report()
    env.update(
        {
            "machine": platform.machine(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d"),
        }
    )
    return env


def diagnose_preset(config, log):
    """`diagnostics.diagnose` on the preset `config.diagnose`'s U-Net and data."""
    preset = data_lib.get_preset(config.diagnose)
    size = preset.image_size
    options = TINY_UNET if config.quick else preset.model
    unet = UNet((size, size, preset.channels), **options)
    model = DiffusionModel(unet, schedule=NoiseSchedule(**preset.schedule))
    model.compile(
        optimizer=keras.optimizers.Adam(preset.training["learning_rate"]),
        steps_per_execution=config.steps_per_execution,
        jit_compile=config.jit_compile,
    )
    batch_size = config.batch_size or (
        8 if config.quick else preset.training["batch_size"]
    )
    dataset = data_lib.make_dataset(
        config.diagnose,
        batch_size,
        seed=0,
        path=config.data_path,
        drop_remainder=True,
    )
    steps = config.steps or (config.steps_per_execution if config.quick else 20)
    report = diagnostics.diagnose(model, dataset, steps=steps, warmup=1, verbose=False)
    log(report.summary())
    return report.to_dict()


def run_benchmarks(config, gpu, log=print):
    """Runs what `config` asks for and returns the results as plain values.

    Args:
        config: a `BenchmarkConfig`.
        gpu: bool, from `benchmarks.device.select_device`.
        log: callable taking one message string. Defaults to `print`.

    Returns:
        A dict: `environment`, `device`, and `diagnosis`, `peer` (by model),
        `components`, or `training` (by model) and `sampling`.
    """
    if config.peer:
        # The workers need the GPU's memory, which TensorFlow would reserve
        # here: this process only counts parameters and saves the data.
        tf.config.set_visible_devices([], "GPU")
    env = environment()
    if config.peer:
        env.update(peer_environment())
    log(
        f"TensorFlow {env['tensorflow']}, Keras {env['keras']}, "
        f"{env['cpu_count']} CPUs, GPU: {gpu}, {env['date']}"
    )
    if config.peer:
        changed = len(env["keras_diffusion_changes"])
        log(
            f"torch {env['torch']}, diffusers {env['diffusers']}; commit "
            f"{env['commit']}, {changed} changed files in keras_diffusion/"
        )
    output = {"environment": env, "device": "gpu" if gpu else "cpu"}
    if config.diagnose:
        output["diagnosis"] = diagnose_preset(config, log)
        return output
    if config.peer:
        output["peer"] = run_peer(config, gpu, log)
        return output
    if config.components:
        threads = config.peer_threads or os.cpu_count()
        with_torch = not missing_peer()
        log(
            f"\n== building blocks of the digits U-Net, batch 64, {threads} "
            "threads, one process a side"
            + ("" if with_torch else " (torch is not installed: Keras only)")
        )
        results = run_components(threads, quick=config.quick, with_torch=with_torch)
        log(format_components(results, quick=config.quick))
        output["components"] = results
        return output
    if config.training:
        output["training"] = {}
        for name in config.models:
            result = benchmark_training(name, config, gpu, log)
            output["training"][name] = result
            log(format_table(name, result))
    if config.sampling:
        output["sampling"] = benchmark_sampling(config, log)
    return output
