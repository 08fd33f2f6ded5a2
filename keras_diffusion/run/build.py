"""The parts of a training run, built from a resolved `TrainConfig`: the
schedule, the data set (a folder through its decode cache), the frozen
autoencoder of a latent run, and the compiled `DiffusionModel`, under the
run's distribution strategy. `keras_diffusion.run.training` runs them.
"""

import keras
import tensorflow as tf

from keras_diffusion import data as data_lib
from keras_diffusion import latent, samplers
from keras_diffusion.averages.power_ema import DEFAULT_SIGMA_RELS
from keras_diffusion.data import decode
from keras_diffusion.distribute import strategy as distribute
from keras_diffusion.models import DiffusionModel, UNet, enable_controlnet, enable_lora
from keras_diffusion.run import init_from, keras_hub_run, text
from keras_diffusion.run.run_settings import PRECISION_POLICIES
from keras_diffusion.schedules.registry import PROCESSES


def build_schedule(config, facts=None):
    """The process of a resolved config: `config.process` built from its
    run settings (the `NoiseSchedule` of `beta_schedule`, the
    `EDMSchedule`, the `FlowMatchSchedule`, ...); `facts` (a dict: the
    run's `"updates"`, its data's `"data_std"`) fill the settings a process
    takes from the run (`Setting.filled_by`) where none is given."""
    return PROCESSES[config.process].from_run_settings(config.to_dict(), facts)


def needs_data_std(config):
    """Whether the config's process takes its data's standard deviation."""
    settings = PROCESSES[config.process].settings
    return any(setting.filled_by == "data_std" for setting in settings)


def data_std(dataset, max_batches=16):
    """The standard deviation of the images of the first `max_batches`
    batches of `dataset` (images, or `(images, labels)`), as a float."""
    total = count = square = 0.0
    for batch in dataset.take(max_batches):
        images = batch[0] if isinstance(batch, tuple) else batch
        images = tf.cast(images, tf.float64)
        total += float(tf.reduce_sum(images))
        square += float(tf.reduce_sum(tf.square(images)))
        count += float(tf.size(images))
    mean = total / count
    return float(max(square / count - mean**2, 0.0) ** 0.5)


def build_dataset(config, verbose=False, cache_dir=None):
    """The training `tf.data.Dataset` of a resolved config; `verbose` shows
    progress while an image folder is decoded; `cache_dir` is a folder's
    decode cache (`from_directory(cache=...)`), `None` for none."""
    kwargs = {}
    if config.dataset == "folder":
        kwargs["cache"] = cache_dir
        kwargs["data_dir"] = config.data_dir
        kwargs["channels"] = config.channels
        kwargs["background"] = config.background
        kwargs["resize"] = config.resize
        kwargs["verbose"] = verbose
        if text.captioned(config):
            kwargs["caption_column"] = config.caption_column
    elif config.data_path:
        kwargs["path"] = config.data_path
    try:
        return data_lib.make_dataset(
            config.dataset,
            config.batch_size,
            image_size=config.image_size,
            with_labels=config.class_conditional,
            seed=config.seed,
            **kwargs,
        )
    except ValueError as error:
        if config.dataset != "folder":
            raise
        # The loader names its own arguments (`folder`, `cache`); say which
        # flag it was.
        flag = (
            "cache_dir, --cache-dir"
            if "`cache`" in str(error)
            else ("data_dir, --data-dir")
        )
        raise ValueError(f"{error} ({flag})") from error


def build_autoencoder(config):
    """The frozen autoencoder of a resolved latent config (a keras-hub
    preset's VAE for `--init-from keras-hub:PRESET`), or `None`."""
    if keras_hub_run.is_source(config.init_from):
        return keras_hub_run.build_autoencoder(config)
    if config.latent == "none":
        return None
    weights = config.autoencoder_weights
    if weights == "random":
        weights = None
    elif weights != "keras-cv":
        weights = tuple(weights.split(","))
    size = config.image_size
    return latent.StableDiffusionAutoencoder((size, size, 3), weights=weights)


def _encode_latents(config, dataset, strategy, verbose=False):
    """`(dataset, autoencoder)`: the images encoded once, in memory, if latent."""
    with strategy.scope():
        autoencoder = build_autoencoder(config)
    if autoencoder is None:
        return dataset, None
    # Small encoder batches: its activations at full resolution are large.
    moments, labels = latent.encode_dataset(
        autoencoder, dataset.unbatch().batch(8), verbose=int(verbose)
    )
    latents = latent.latent_dataset(
        moments, config.batch_size, labels, seed=config.seed
    )
    latents.class_names = getattr(dataset, "class_names", None)
    # A captioned folder's: the run's vocabulary, prompts and data.png.
    latents.captions = getattr(dataset, "captions", None)
    latents.num_examples = len(moments)
    # What identifies the data (`keras_diffusion.data.identity`): the images'.
    latents.file_paths = getattr(dataset, "file_paths", None)
    return latents, autoencoder


def build_sampler(config, checkpoint_sampler=None):
    """The run's sampler: its sample grids', and the saved model's default.

    A checkpoint's sampler (`init_from`) of the run's algorithm keeps its
    settings (a diffusers scheduler's spacing, offset, clipping) with the
    run's steps.
    """
    kind = samplers.SAMPLERS[config.sampler]
    if type(checkpoint_sampler) is kind:
        settings = checkpoint_sampler.get_config()
        settings["num_steps"] = config.sampling_steps
        return kind.from_config(settings)
    return kind(num_steps=config.sampling_steps)


def build_model(
    config, num_classes, steps_per_epoch, autoencoder=None, std=None, conditioning=None
):
    """The compiled `DiffusionModel` of a resolved config.

    Args:
        config: a resolved `TrainConfig`.
        num_classes: int, or `None` for an unconditional model.
        steps_per_epoch: int, for the cosine learning-rate decay and a
            process's curriculum.
        autoencoder: the `build_autoencoder` of a latent config: the U-Net
            is then sized for its latent grid. Defaults to `None`.
        std: float, the data's standard deviation (`data_std`), for a
            process that takes it (EDM's `sigma_data`); `None` leaves it
            to the process's default. Defaults to `None`.
        conditioning: a `TextConditioning` (a captioned folder's,
            `text.build_conditioning`): the U-Net then attends to its
            embeddings. Defaults to `None`.
    """
    run_steps = config.epochs * steps_per_epoch
    # With gradient accumulation, a weight update every `grad_accum` batches.
    facts = {"updates": run_steps // config.grad_accum, "data_std": std}

    def schedule_of(config):
        return build_schedule(config, facts)

    if keras_hub_run.is_source(config.init_from):
        # The preset's model, its sampler and guidance the run's.
        schedule = _with_objective(config, schedule_of(config))
        settings = _model_settings(config, build_sampler(config))
        model = keras_hub_run.build_model(config, schedule, **settings)
    else:
        model = _unet_model(config, num_classes, autoencoder, conditioning, schedule_of)
    _compile(model, config, run_steps)
    return model


def _with_objective(config, schedule):
    """`schedule` with the run's objective (`None`: the process fixes what
    its network predicts)."""
    return schedule.with_objective(
        config.prediction_type, config.loss_weighting, config.min_snr_gamma
    )


def _model_settings(config, sampler):
    """The `DiffusionModel` arguments every run's model takes from its
    config, with its grids' `sampler` (the saved model's default)."""
    return {
        "ema_decay": config.ema_decay,
        "seed": config.seed,
        "sampler": sampler,
        "posthoc_ema": DEFAULT_SIGMA_RELS if config.posthoc_ema else None,
        # What sample.py and evaluate.py sample the file at, wherever it goes.
        "guidance_scale": config.guidance_scale,
    }


def _unet_model(config, num_classes, autoencoder, conditioning, schedule_of):
    """The `DiffusionModel` of a U-Net run: a new U-Net, or an `init_from`
    checkpoint's; LoRA on it with `lora_rank`."""
    if config.init_from is not None:
        unet, schedule, checkpoint_sampler = init_from.denoiser_and_schedule(
            config, num_classes, schedule_of
        )
        if config.remat and not unet.remat:
            unet = _rematerialized(unet)
    else:
        groups = 8 if all(w % 8 == 0 for w in config.widths) else 1
        shape = (config.image_size, config.image_size, config.channels)
        schedule, checkpoint_sampler = schedule_of(config), None
        unet = UNet(
            shape if autoencoder is None else autoencoder.latent_shape,
            widths=config.widths,
            num_res_blocks=config.num_res_blocks,
            attention_levels=config.attention_levels,
            num_classes=num_classes,
            groups=groups,
            remat=config.remat,
            cross_attention_dim=None if conditioning is None else conditioning.width,
            time_inputs=schedule.time_inputs,
        )
    # A checkpoint's schedule takes the run's objective.
    model = DiffusionModel(
        unet,
        _with_objective(config, schedule),
        num_classes=num_classes,
        class_dropout=config.class_dropout if num_classes else 0.0,
        conditioning=conditioning,
        autoencoder=autoencoder,
        # `generate` on the saved model samples as the run's grid did.
        **_model_settings(config, build_sampler(config, checkpoint_sampler)),
    )
    if config.lora_rank is not None:
        model = enable_lora(model, config.lora_rank)
    if config.control is not None:
        model = _controlled(model, config)
    return model


def _controlled(model, config):
    """`model` with a ControlNet of its U-Net, its control made by the
    `--control` extractor; a model it cannot steer is refused by flag."""
    extractor = {"name": config.control}
    if config.control == "silhouette":
        extractor["background"] = _background(config)
    try:
        return enable_controlnet(model, conditioning_channels=1, extractor=extractor)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"--control {config.control} on --init-from {config.init_from}: {error}"
        ) from error


def _background(config):
    """The background of the training images in [-1, 1] (a folder's
    `--background`, else black: the digits' and the keras datasets')."""
    if config.dataset != "folder":
        return -1.0
    rgb = decode.parse_background(config.background or decode.DEFAULT_BACKGROUND)
    if config.channels == 1:  # the grey of Pillow's "L" conversion
        return (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 127.5 - 1.0
    return [value / 127.5 - 1.0 for value in rgb]


def _compile(model, config, run_steps):
    """Compiles `model` with the run's optimizer (Adam, the learning rate
    decayed over `run_steps` batches with `lr_schedule` cosine), XLA choice
    and steps per execution."""
    learning_rate = config.learning_rate
    if config.lr_schedule == "cosine":
        # Keras evaluates a schedule at its count of batches, also while it
        # accumulates gradients: the decay spans the run's batches.
        learning_rate = keras.optimizers.schedules.CosineDecay(
            config.learning_rate, decay_steps=run_steps
        )
    accumulate = config.grad_accum if config.grad_accum > 1 else None
    model.compile(
        optimizer=keras.optimizers.Adam(
            learning_rate, gradient_accumulation_steps=accumulate
        ),
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
    )


def _rematerialized(unet):
    """`unet` rebuilt with `remat=True`, its weights copied."""
    copy = UNet.from_config({**unet.get_config(), "remat": True})
    copy.set_weights(unet.get_weights())
    return copy


def set_precision(mixed_precision):
    policy = PRECISION_POLICIES[mixed_precision]
    keras.mixed_precision.set_global_policy(policy)


def count_steps(dataset):
    """The batches of one epoch of `dataset`; counted by reading it when its
    length is unknown (the run's data is cached or in memory).

    Raises:
        ValueError: the dataset is empty, or infinite (it repeats, so an
            epoch has no end: `fit` needs `steps_per_epoch`).
    """
    steps = int(dataset.cardinality())
    if steps == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            "The dataset is infinite (it repeats), so an epoch has no end: "
            "remove the `repeat()`, or call `fit` with `steps_per_epoch`."
        )
    if steps < 0:  # unknown: count once
        steps = sum(1 for _ in dataset)
    if steps == 0:
        raise ValueError("The dataset is empty: it yields no batch.")
    return steps


def build_data_and_model(config, verbose=False, cache_dir=None):
    """`(dataset, model, steps_per_epoch)` of a resolved config; writes
    nothing but a folder's decode cache."""
    # "none" is the default strategy, whose scope does nothing.
    strategy = distribute.make_strategy(config.strategy)
    dataset = build_dataset(config, verbose, cache_dir)
    num_classes = None
    if config.class_conditional:
        num_classes = len(getattr(dataset, "class_names", None) or []) or None
        if num_classes is None:
            raise ValueError(
                "Argument `class_conditional` needs labelled data (class "
                f"subfolders for a folder). Received: dataset={config.dataset!r}"
            )
    captions = getattr(dataset, "captions", None)
    dataset, autoencoder = _encode_latents(config, dataset, strategy, verbose)
    steps_per_epoch = count_steps(dataset)
    # Pixels only: a latent run's batches are the autoencoder's moments.
    std = data_std(dataset) if needs_data_std(config) and not autoencoder else None
    with strategy.scope():
        conditioning = None
        # A keras-hub preset's model brings its own text encoders.
        if captions is not None and not keras_hub_run.is_source(config.init_from):
            source = None
            if config.init_from is not None:  # a text run's (`text.from_checkpoint`)
                source = init_from.checkpoint_of(config).model.conditioning
            conditioning = text.build_conditioning(config, captions, source)
        model = build_model(
            config, num_classes, steps_per_epoch, autoencoder, std, conditioning
        )
    return dataset, model, steps_per_epoch
