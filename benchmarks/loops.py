"""One runner a training variant; `run(steps)` trains and returns the seconds.

Each runner ends its timing by reading the optimizer's step counter (or the
last loss), so the clock stops only once the device has done the work.
"""

import time

import keras
import numpy as np
import tensorflow as tf

from benchmarks.config import EMA_DECAY, build_unet
from keras_diffusion import data as data_lib
from keras_diffusion.averages.ema import ExponentialMovingAverage
from keras_diffusion.models import DiffusionModel
from keras_diffusion.trainers.xla import resolve_jit_compile


def make_train_step(denoiser, optimizer, ema):
    """The step of the hand-written loop: x_t, t and noise come from outside."""
    variables = denoiser.trainable_variables

    def step(x_t, t, noise):
        with tf.GradientTape() as tape:
            prediction = tf.cast(denoiser([x_t, t], training=True), tf.float32)
            loss = tf.reduce_mean(tf.square(prediction - noise))
            scaled = optimizer.scale_loss(loss)
        optimizer.apply(tape.gradient(scaled, variables), variables)
        if ema is not None:
            ema.update(variables)
        return loss

    return step


def host_noising(images, schedule, batch_size, rng):
    """One naive batch: NumPy timesteps, noise and forward noising on the host."""
    index = rng.integers(0, len(images), batch_size)
    x0 = images[index]
    T = schedule.num_train_timesteps
    t = np.random.randint(0, T, size=batch_size)
    noise = np.random.standard_normal(x0.shape).astype(np.float32)
    abar = schedule.alphas_cumprod[t].reshape(-1, 1, 1, 1)
    x_t = (np.sqrt(abar) * x0 + np.sqrt(1.0 - abar) * noise).astype(np.float32)
    return x_t, t.astype(np.float32), noise


def _adam_and_ema(denoiser, lr, ema):
    optimizer = keras.optimizers.Adam(lr)
    variables = denoiser.trainable_variables
    return optimizer, ExponentialMovingAverage(variables) if ema else None


class NaiveLoop:
    """(a): the loop users write, a `@tf.function` step fed from NumPy."""

    def __init__(self, denoiser, schedule, images, batch_size, lr, ema):
        self.images, self.schedule, self.batch_size = images, schedule, batch_size
        self.rng = np.random.default_rng(0)
        self.optimizer, self.ema = _adam_and_ema(denoiser, lr, ema)
        self.step = tf.function(make_train_step(denoiser, self.optimizer, self.ema))

    def run(self, steps):
        start = time.perf_counter()
        for _ in range(steps):
            loss = self.step(
                *host_noising(self.images, self.schedule, self.batch_size, self.rng)
            )
        float(loss)
        return time.perf_counter() - start


class ComputeOnly:
    """(f): the same step on batches already on the device, in one function."""

    def __init__(self, denoiser, schedule, images, batch_size, lr, ema, jit):
        rng = np.random.default_rng(1)
        batches = [host_noising(images, schedule, batch_size, rng) for _ in range(4)]
        self.staged = [
            tf.identity(np.stack(part)) for part in zip(*batches, strict=True)
        ]
        self.optimizer, self.ema = _adam_and_ema(denoiser, lr, ema)
        # The step is compiled as fit compiles it (`jit`); the loop around it
        # is not: XLA on the CPU runs a whole training step inside a compiled
        # while loop tens of times slower than the step alone.
        step = tf.function(
            make_train_step(denoiser, self.optimizer, self.ema), jit_compile=jit
        )
        staged = self.staged

        def body(i):
            j = i % 4
            step(staged[0][j], staged[1][j], staged[2][j])
            return (i + 1,)

        # An explicit while_loop: no AutoGraph, so no dependence on the source.
        self.loop = tf.function(
            lambda n: tf.while_loop(lambda i: i < n, body, (tf.constant(0),))
        )

    def run(self, steps):
        start = time.perf_counter()
        self.loop(tf.constant(steps))
        int(self.optimizer.iterations.numpy())
        return time.perf_counter() - start


class FitLoop:
    """(b)-(e): `DiffusionModel.fit` on a `keras_diffusion.data` pipeline.

    `epoch_steps`: the steps of the `run` calls to come, when known. With
    `compile`'s defaults the XLA choice is then measured at the steps a
    compiled call of their epochs takes, so the form timed is the one that
    trains. `None` measures at a long epoch's steps a call (8 with XLA), and each
    `run` of fewer steps rebuilds its step and compiles it again.
    """

    def __init__(
        self,
        denoiser,
        schedule,
        images,
        batch_size,
        lr,
        ema,
        epoch_steps=None,
        **compile,
    ):
        self.model = DiffusionModel(
            denoiser, schedule=schedule, ema_decay=EMA_DECAY if ema else None, seed=0
        )
        self.model.compile(optimizer=keras.optimizers.Adam(lr), **compile)
        self.dataset = data_lib.from_arrays(
            images, batch_size=batch_size, seed=0, drop_remainder=True
        ).repeat()
        if "jit_compile" not in compile:
            # The defaults' choice for a long run: each `run` is a short `fit`,
            # which would keep graph mode as too short to repay XLA.
            self.model.measure_jit_compile(
                self.dataset, epoch_steps=epoch_steps, verbose=0
            )

    def run(self, steps):
        # A finite epoch that fit reads to its end, as in real training: an
        # iterator abandoned mid-stream (steps_per_epoch on a repeated dataset)
        # can make its deletion wait on tf.data's autotune thread for seconds.
        dataset = self.dataset.take(steps)
        start = time.perf_counter()
        self.model.fit(dataset, epochs=1, verbose=0)
        int(self.model.optimizer.iterations.numpy())
        return time.perf_counter() - start


def build_variants(name, variants, batch_size, spe, lr, ema, gpu, images):
    """`({letter: runner}, parameters)` of the model `name`, one U-Net shared."""
    unet, schedule = build_unet(name)
    args = (unet, schedule, images, batch_size, lr, ema)
    built = {}
    for key in variants:
        if key == "a":
            built[key] = NaiveLoop(*args)
        elif key == "b":
            built[key] = FitLoop(*args)
        elif key == "c":
            # (b) with another steps a call: the same XLA choice, measured once.
            jit = {"jit_compile": built["b"].model.jit_compile} if "b" in built else {}
            built[key] = FitLoop(*args, steps_per_execution=spe, **jit)
        elif key == "d":
            built[key] = FitLoop(*args, jit_compile=False)
        elif key == "e":
            mixed_unet, _ = build_unet(name, mixed=True)
            built[key] = FitLoop(mixed_unet, *args[1:], jit_compile=True)
        elif key == "f":
            # The limit uses the compile setting fit's "auto" chose.
            jit = built["b"].model.jit_compile if "b" in built else None
            if jit is None:
                jit = resolve_jit_compile("auto")
            built[key] = ComputeOnly(*args, jit=jit)
    return built, unet.count_params()
