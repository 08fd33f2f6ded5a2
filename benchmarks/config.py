"""What is benchmarked: the settings, the variants and the models."""

import dataclasses

import keras

from keras_diffusion import data as data_lib
from keras_diffusion.models import UNet
from keras_diffusion.schedules.noise_schedule import NoiseSchedule

VARIANTS = {
    "a": "naive loop",
    "b": "fit (defaults: XLA, spe auto)",
    "c": "fit, steps_per_execution given",
    "d": "fit, jit_compile=False",
    "e": "fit, mixed precision + XLA",
    "f": "compute-only limit",
}
# Per model: a preset's U-Net, schedule and image size, or `unet` and
# `image_size` overriding them.
TINY_UNET = {"widths": (8,), "num_res_blocks": 1, "groups": 4, "embedding_dim": 16}
MODELS = {
    "small": {"preset": "digits"},
    "mnist": {"preset": "mnist"},
    "tiny": {"preset": "digits", "image_size": 8, "unet": TINY_UNET},
}
CPU_RUNS = {  # batch, timed steps a trial, trials
    "small": (64, 24, 5),
    "mnist": (16, 4, 3),
    "tiny": (8, 2, 2),
}
GPU_RUNS = {"small": (128, 40, 5), "mnist": (128, 20, 5), "tiny": (8, 4, 2)}
# The EMA decay of every variant (warm-up on) and of the PyTorch peer.
EMA_DECAY = 0.999


@dataclasses.dataclass
class BenchmarkConfig:
    """The settings of a benchmark run; `None` means the model's own.

    Args:
        models: names of `MODELS` to train.
        variants: letters of `VARIANTS` to run (`"e"` runs on a GPU only).
        batch_size: int or `None` (`CPU_RUNS` / `GPU_RUNS`).
        steps: int or `None`, timed steps a trial.
        trials: int or `None`.
        steps_per_execution: int, for variant c and `diagnose`.
        learning_rate: float, Adam's.
        ema: bool, train every variant with an EMA of the weights.
        quick: bool, the tiny model, few steps and trials.
        training: bool, run the training benchmark.
        sampling: bool, run the sampling benchmark.
        diagnose: a preset name: diagnose its U-Net and data instead.
        data_path: local `.npz` of a keras data set, for `diagnose`.
        jit_compile: bool, for `diagnose`.
        sampling_images: int, images a sampling call.
        sampling_steps: int, DDIM steps.
        sampling_trials: int.
        peer: bool, compare with PyTorch + diffusers on the same U-Net
            instead (`benchmarks.peer_compare`).
        peer_mixed: bool, with `peer`, also mixed precision on both sides.
        peer_threads: int or `None` (every core): with `peer` or
            `components`, the intra- and inter-op threads of both sides.
        components: bool, time the U-Net's convolutions and GroupNorms
            alone in each framework instead (`benchmarks.components`).
    """

    models: tuple = ("small", "mnist")
    variants: tuple = tuple(VARIANTS)
    batch_size: int | None = None
    steps: int | None = None
    trials: int | None = None
    steps_per_execution: int = 1
    learning_rate: float = 2e-4
    ema: bool = True
    quick: bool = False
    training: bool = True
    sampling: bool = True
    diagnose: str | None = None
    data_path: str | None = None
    jit_compile: bool = False
    sampling_images: int = 16
    sampling_steps: int = 50
    sampling_trials: int = 5
    peer: bool = False
    peer_mixed: bool = False
    peer_threads: int | None = None
    components: bool = False


def image_size(name):
    """The image size of the model `name` of `MODELS`."""
    spec = MODELS[name]
    return spec.get("image_size") or data_lib.get_preset(spec["preset"]).image_size


def build_unet(name, mixed=False):
    """`(unet, schedule)` of the model `name`.

    `mixed`: `True` for mixed_float16, or a dtype policy name such as
    `"mixed_bfloat16"`; `False` for float32.
    """
    spec = MODELS[name]
    preset = data_lib.get_preset(spec["preset"])
    options = spec.get("unet") or preset.model
    size = image_size(name)
    policy = keras.mixed_precision.global_policy()
    if mixed:
        keras.mixed_precision.set_global_policy(
            "mixed_float16" if mixed is True else mixed
        )
    try:
        unet = UNet((size, size, 1), **options)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    return unet, NoiseSchedule(**preset.schedule)


def load_images(size):
    """The embedded digits at `size x size`, in [-1, 1]."""
    images, _ = data_lib.load_digits_arrays(image_size=size)
    return images
