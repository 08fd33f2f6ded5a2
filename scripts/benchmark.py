"""Training and sampling throughput: the hand-written loop vs `fit` vs the limit.

    python scripts/benchmark.py                       # small + mnist U-Nets, CPU
    python scripts/benchmark.py --models small --json bench.json
    python scripts/benchmark.py --device gpu --models mnist --batch-size 128
    python scripts/benchmark.py --quick               # seconds, for tests
    python scripts/benchmark.py --diagnose digits     # why is my training slow?

Training variants, all on the same denoiser, data, optimizer (Adam) and EMA:

  a  naive: per batch, NumPy timesteps, noise and noising on the host, then a
     `@tf.function` step (what users write by hand)
  b  `DiffusionModel.fit` (on-device noising), steps_per_execution=1
  c  b with steps_per_execution > 1
  d  b with jit_compile=True (XLA)
  e  b with mixed precision (mixed_float16) and XLA (GPU only)
  f  compute-only limit: the same forward + backward + Adam + EMA on batches
     already on the device, looped inside one compiled function

Trials are interleaved in one process (the order rotates each trial) and every
ratio is the median over trials of the per-trial ratio, which cancels most of
the drift of a shared machine. Peak memory is the largest resident set size
(CPU) or allocator peak (GPU) seen while a variant ran; on the CPU it includes
what the variants run before it still hold.
"""

import argparse
import json
import os
import platform
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

VARIANTS = {
    "a": "naive loop",
    "b": "fit",
    "c": "fit, steps_per_execution",
    "d": "fit, jit_compile",
    "e": "fit, mixed precision + XLA",
    "f": "compute-only limit",
}
# Per model: image size, U-Net options, and the CPU batch, steps and trials.
SMALL_UNET = {"widths": (32, 64, 128), "num_res_blocks": 1}  # the digits preset
TINY_UNET = {"widths": (8,), "num_res_blocks": 1, "groups": 4, "embedding_dim": 16}
MODELS = {
    "small": {"image_size": 16, "unet": SMALL_UNET, "preset": "digits"},
    "mnist": {"image_size": 32, "unet": None, "preset": "mnist"},
    "tiny": {"image_size": 8, "unet": TINY_UNET, "preset": "digits"},
}
CPU_RUNS = {  # batch, timed steps a trial, trials
    "small": (64, 24, 5),
    "mnist": (16, 4, 3),
    "tiny": (8, 2, 2),
}
GPU_RUNS = {"small": (128, 40, 5), "mnist": (128, 20, 5), "tiny": (8, 4, 2)}
DEFAULTS = {
    "models": "small,mnist",
    "variants": "a,b,c,d,e,f",
    "steps_per_execution": 4,
    "learning_rate": 2e-4,
    "sampling_images": 16,
    "sampling_steps": 50,
    "sampling_trials": 5,
}


class PeakMemory:
    """Largest RSS (CPU, sampled every 5 ms) or allocator peak (GPU) in a block."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.peak = 0
        self._stop = None

    @staticmethod
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        import tensorflow as tf

        if self.gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")
            return self
        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, self.rss())
                self._stop.wait(0.005)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        import tensorflow as tf

        if self.gpu:
            info = tf.config.experimental.get_memory_info("GPU:0")
            self.peak = max(self.peak, info["peak"])
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())


def build_unet(name, mixed=False):
    import keras

    import keras_diffusion as kd

    spec = MODELS[name]
    preset = kd.data.get_preset(spec["preset"])
    options = spec["unet"] or preset.model
    size = spec["image_size"]
    policy = keras.mixed_precision.global_policy()
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        unet = kd.UNet((size, size, 1), **options)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    return unet, kd.NoiseSchedule(**preset.schedule)


def load_images(size):
    from keras_diffusion.data import load_digits_arrays

    images, _ = load_digits_arrays(image_size=size)
    return images


def make_train_step(denoiser, optimizer, ema):
    """The step of the hand-written loop: x_t, t and noise come from outside."""
    import tensorflow as tf

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


class NaiveLoop:
    """(a): the loop users write, a `@tf.function` step fed from NumPy."""

    def __init__(self, denoiser, schedule, images, batch_size, lr, ema):
        import keras
        import tensorflow as tf

        from keras_diffusion.models.ema import ExponentialMovingAverage

        self.images, self.schedule, self.batch_size = images, schedule, batch_size
        self.rng = np.random.default_rng(0)
        self.optimizer = keras.optimizers.Adam(lr)
        variables = denoiser.trainable_variables
        self.ema = ExponentialMovingAverage(variables) if ema else None
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
        import keras
        import tensorflow as tf

        from keras_diffusion.models.ema import ExponentialMovingAverage

        rng = np.random.default_rng(1)
        batches = [host_noising(images, schedule, batch_size, rng) for _ in range(4)]
        self.staged = [
            tf.identity(np.stack(part)) for part in zip(*batches, strict=True)
        ]
        self.optimizer = keras.optimizers.Adam(lr)
        variables = denoiser.trainable_variables
        self.ema = ExponentialMovingAverage(variables) if ema else None
        step = make_train_step(denoiser, self.optimizer, self.ema)
        staged = self.staged

        def body(i):
            j = i % 4
            step(staged[0][j], staged[1][j], staged[2][j])
            return (i + 1,)

        # An explicit while_loop: no AutoGraph, so no dependence on the source.
        self.loop = tf.function(
            lambda n: tf.while_loop(lambda i: i < n, body, (tf.constant(0),)),
            jit_compile=jit,
        )

    def run(self, steps):
        import tensorflow as tf

        start = time.perf_counter()
        self.loop(tf.constant(steps))
        int(self.optimizer.iterations.numpy())
        return time.perf_counter() - start


class FitLoop:
    """(b)-(e): `DiffusionModel.fit` on a `keras_diffusion.data` pipeline."""

    def __init__(self, denoiser, schedule, images, batch_size, lr, ema, **compile):
        import keras

        import keras_diffusion as kd

        self.model = kd.DiffusionModel(
            denoiser, schedule=schedule, ema_decay=0.999 if ema else None, seed=0
        )
        self.model.compile(optimizer=keras.optimizers.Adam(lr), **compile)
        self.dataset = kd.data.from_arrays(
            images, batch_size=batch_size, seed=0, drop_remainder=True
        ).repeat()

    def run(self, steps):
        start = time.perf_counter()
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=steps, verbose=0)
        int(self.model.optimizer.iterations.numpy())
        return time.perf_counter() - start


def build_variants(name, variants, batch_size, spe, lr, ema, gpu, images):
    unet, schedule = build_unet(name)
    args = (unet, schedule, images, batch_size, lr, ema)
    built = {}
    for key in variants:
        if key == "a":
            built[key] = NaiveLoop(*args)
        elif key == "b":
            built[key] = FitLoop(*args)
        elif key == "c":
            built[key] = FitLoop(*args, steps_per_execution=spe)
        elif key == "d":
            built[key] = FitLoop(*args, jit_compile=True)
        elif key == "e":
            mixed_unet, _ = build_unet(name, mixed=True)
            built[key] = FitLoop(mixed_unet, *args[1:], jit_compile=True)
        elif key == "f":
            # The limit uses the compile setting fit resolves "auto" to.
            built[key] = ComputeOnly(*args, jit=gpu)
    return built, unet.count_params()


def median_ratio(numerators, denominators):
    return float(np.median(np.asarray(numerators) / np.asarray(denominators)))


def benchmark_training(name, args, gpu, log):
    batch_size, steps, trials = (GPU_RUNS if gpu else CPU_RUNS)[name]
    batch_size = args.batch_size or batch_size
    steps = args.steps or steps
    trials = args.trials or trials
    spe = args.steps_per_execution
    steps = max(spe, steps - steps % spe) if "c" in args.variants else steps
    variants = [v for v in args.variants if v != "e" or gpu]
    images = load_images(MODELS[name]["image_size"])
    log(f"\n== {name} U-Net, {images.shape[1]}x{images.shape[2]}, batch {batch_size}")
    built, parameters = build_variants(
        name,
        variants,
        batch_size,
        spe,
        args.learning_rate,
        not args.no_ema,
        gpu,
        images,
    )
    memory, warmup_s = {}, {}
    for key, runner in built.items():
        with PeakMemory(gpu) as peak:
            warmup_s[key] = runner.run(spe if key == "c" else 1)
            if not args.quick:
                runner.run(spe if key == "c" else 1)
        memory[key] = peak.peak
        log(f"  warm-up {key} ({VARIANTS[key]}): {warmup_s[key]:.1f} s")
    rates = {key: [] for key in built}
    for trial in range(trials):
        order = list(built)
        order = order[trial % len(order) :] + order[: trial % len(order)]
        for key in order:
            with PeakMemory(gpu) as peak:
                rates[key].append(steps / built[key].run(steps))
            memory[key] = max(memory[key], peak.peak)
        log(
            f"  trial {trial + 1}/{trials}: "
            + ", ".join(f"{k} {rates[k][-1]:.2f}" for k in built)
            + " steps/s"
        )
    results = {}
    for key in built:
        entry = {
            "variant": VARIANTS[key],
            "steps_per_sec": float(np.median(rates[key])),
            "images_per_sec": float(np.median(rates[key])) * batch_size,
            "first_call_s": warmup_s[key],
            "peak_memory_mib": memory[key] / 2**20,
        }
        if "a" in rates:
            entry["ratio_to_naive"] = median_ratio(rates[key], rates["a"])
        if "f" in rates:
            entry["ratio_to_compute"] = median_ratio(rates[key], rates["f"])
        results[key] = entry
    return {
        "batch_size": batch_size,
        "steps_per_trial": steps,
        "trials": trials,
        "steps_per_execution": spe,
        "ema": not args.no_ema,
        "parameters": int(parameters),
        "variants": results,
    }


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


def benchmark_sampling(args, log):
    import keras_diffusion as kd

    name = "tiny" if args.quick else "small"
    unet, schedule = build_unet(name)
    model = kd.DiffusionModel(unet, schedule=schedule, seed=0)
    steps = 5 if args.quick else DEFAULTS["sampling_steps"]
    trials = 2 if args.quick else DEFAULTS["sampling_trials"]
    num = DEFAULTS["sampling_images"]
    sampler = kd.DDIMSampler(num_steps=steps)
    size = MODELS[name]["image_size"]
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
        order = list(runs)[trial % 3 :] + list(runs)[: trial % 3]
        for key in order:
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


def format_table(name, result):
    lines = [
        f"\n{name}: batch {result['batch_size']}, {result['steps_per_trial']} "
        f"steps x {result['trials']} trials (medians)",
        f"  {'variant':34s} {'steps/s':>8s} {'images/s':>9s} {'vs (a)':>7s} "
        f"{'vs (f)':>7s} {'peak MiB':>9s} {'1st call s':>10s}",
    ]
    for key, v in result["variants"].items():
        lines.append(
            f"  ({key}) {v['variant']:30s} {v['steps_per_sec']:8.3f} "
            f"{v['images_per_sec']:9.1f} {v.get('ratio_to_naive', float('nan')):7.2f} "
            f"{v.get('ratio_to_compute', float('nan')):7.2f} "
            f"{v['peak_memory_mib']:9.0f} {v['first_call_s']:10.1f}"
        )
    return "\n".join(lines)


def run_diagnose(args, log):
    import keras

    import keras_diffusion as kd
    from keras_diffusion import diagnostics

    preset = kd.data.get_preset(args.diagnose)
    size = preset.image_size
    options = TINY_UNET if args.quick else preset.model
    unet = kd.UNet((size, size, preset.channels), **options)
    model = kd.DiffusionModel(unet, schedule=kd.NoiseSchedule(**preset.schedule))
    model.compile(
        optimizer=keras.optimizers.Adam(preset.training["learning_rate"]),
        steps_per_execution=args.steps_per_execution,
        jit_compile=args.jit_compile,
    )
    batch_size = args.batch_size or (8 if args.quick else preset.training["batch_size"])
    dataset = kd.data.make_dataset(
        args.diagnose, batch_size, seed=0, path=args.data_path, drop_remainder=True
    )
    steps = args.steps or (args.steps_per_execution if args.quick else 20)
    report = diagnostics.diagnose(model, dataset, steps=steps, warmup=1, verbose=False)
    log(report.summary())
    return report.to_dict()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        default=DEFAULTS["models"],
        help="comma-separated: small (digits U-Net, 16x16), mnist (the mnist "
        "preset U-Net, 32x32), tiny (8x8, for tests). Default: %(default)s",
    )
    parser.add_argument(
        "--variants",
        default=DEFAULTS["variants"],
        help="comma-separated letters a-f (see above); e runs on a GPU only. "
        "Default: %(default)s",
    )
    parser.add_argument("--batch-size", type=int, help="override the batch size")
    parser.add_argument("--steps", type=int, help="override timed steps a trial")
    parser.add_argument("--trials", type=int, help="override the number of trials")
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=DEFAULTS["steps_per_execution"],
        help="for variant c and --diagnose. Default: %(default)s",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=DEFAULTS["learning_rate"]
    )
    parser.add_argument(
        "--no-ema", action="store_true", help="train every variant without EMA"
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="cpu hides GPUs; gpu fails without one. Default: %(default)s",
    )
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny model, few steps and trials: checks that everything runs",
    )
    parser.add_argument(
        "--no-sampling", action="store_true", help="skip the sampling benchmark"
    )
    parser.add_argument(
        "--no-training", action="store_true", help="skip the training benchmark"
    )
    parser.add_argument(
        "--diagnose",
        metavar="PRESET",
        help="instead of benchmarking, run keras_diffusion.diagnostics on the "
        "preset's U-Net and data set (digits, mnist, fashion_mnist, cifar10)",
    )
    parser.add_argument(
        "--data-path", help="local .npz for --diagnose with a keras data set"
    )
    parser.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile with jit_compile=True for --diagnose",
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    for model in args.models:
        if model not in MODELS:
            parser.error(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    for variant in args.variants:
        if variant not in VARIANTS:
            parser.error(f"unknown variant {variant!r}; choose from a-f")
    if args.quick:
        args.models = ["tiny"]
    return args


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    gpu = bool(tf.config.list_physical_devices("GPU")) and args.device != "cpu"
    if args.device == "gpu" and not gpu:
        raise SystemExit("--device gpu: TensorFlow sees no GPU.")
    from keras_diffusion import diagnostics

    def log(text):
        print(text, flush=True)

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
    log(
        f"TensorFlow {env['tensorflow']}, Keras {env['keras']}, "
        f"{env['cpu_count']} CPUs, GPU: {gpu}, {env['date']}"
    )
    output = {"environment": env, "device": "gpu" if gpu else "cpu"}
    if args.diagnose:
        output["diagnosis"] = run_diagnose(args, log)
    else:
        if not args.no_training:
            output["training"] = {}
            for name in args.models:
                result = benchmark_training(name, args, gpu, log)
                output["training"][name] = result
                log(format_table(name, result))
        if not args.no_sampling:
            output["sampling"] = benchmark_sampling(args, log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(output, f, indent=2, default=str)
    return output


if __name__ == "__main__":
    main()
