"""DiffusionModel: a denoiser trained with `fit`, noising on the device."""

import warnings

import keras

from keras_diffusion.adapters import lora as lora_layers
from keras_diffusion.averages import build as averages
from keras_diffusion.averages.power_ema import check_sigma_rels
from keras_diffusion.models import controlled, random_state, validation
from keras_diffusion.models import denoiser as denoiser_calls
from keras_diffusion.models.editing import EditingMixin
from keras_diffusion.models.sampler_choice import (
    legacy_default_sampler,
    resolve_sampler,
)
from keras_diffusion.models.sampling import SamplingMixin, SamplingState
from keras_diffusion.models.train_step import TrainStepMixin
from keras_diffusion.schedules.noise_schedule import NoiseSchedule
from keras_diffusion.trainers.trainer import Trainer, TrainerState
from keras_diffusion.utils import keras_internals
from keras_diffusion.utils.checks import check_float


@keras.saving.register_keras_serializable(package="keras_diffusion")
@keras_internals.skip_symbolic_build
class DiffusionModel(TrainStepMixin, Trainer, SamplingMixin, EditingMixin, keras.Model):
    """Trains a denoiser with `fit` (its train step in
    `keras_diffusion.models.train_step`); samples with `generate`; edits
    images with `inpaint` and `img2img` (`keras_diffusion.models.editing`).

    Its parts share no private state: `compile` and `fit` are the trainer's
    (`keras_diffusion.trainers.Trainer`, its state in `trainer_state`),
    `generate` the sampling's (its state in `sampling_state`), the averages
    are `ema` and `power_ema` (`keras_diffusion.averages`).

    Each training step runs on the device inside the compiled `train_step`:
    timesteps `t ~ U{0, ..., T-1}` and noise `eps ~ N(0, I)` are drawn from the
    model's own `keras.random.SeedGenerator`, `x_t` is formed by
    `schedule.add_noise`, the denoiser predicts the target of the schedule's
    `prediction_type`, and a (weighted) MSE drives one optimizer step followed
    by an update of the exponential moving average (EMA) of the weights
    (`schedule.training_loss`).

    Under a `tf.distribute` strategy (build and compile the model inside
    `strategy.scope()`, see `keras_diffusion.distribute`), each replica draws
    its own timesteps and noise, and the update for a global batch is the one
    a single device makes for it, also when the batch splits unevenly.

    Args:
        denoiser: a Keras model (Functional, Sequential or subclassed)
            called as `denoiser([x_t, t])`, or as `denoiser([x_t, t, labels])`
            when class-conditional (`denoiser([x_t, t, context])` for a text
            model: `conditioning`), with `x_t` of shape `(batch, H, W, C)` and
            `t` float32 of shape `(batch,)`; it returns a prediction of
            `x_t`'s shape. A subclassed model whose `call` takes two or more
            required positional arguments is called as `denoiser(x_t, t)`
            (or `denoiser(x_t, t, labels)`) instead. An unbuilt denoiser is
            built on a zero batch of `image_shape`, before the EMA and the
            optimizer are made (`keras_diffusion.models.denoiser`).
            `keras_diffusion.UNet` is the built-in one.
        schedule: the process (`keras_diffusion.schedules.Process`):
            `NoiseSchedule`, or `EDMSchedule` to train the EDM way
            (Karras et al., 2022): sigma = exp(p_mean + p_std * n) from the
            model's seed stream, x = x0 + sigma * noise, the denoiser called
            on `[c_in * x, c_noise]` (plus labels), D = c_skip * x +
            c_out * F and the loss weight (sigma**2 + sigma_data**2) /
            (sigma * sigma_data)**2 (`EDMSchedule.training_loss`); it
            fixes what the network predicts.
            Or `FlowMatchSchedule` for flow matching (rectified flow, as
            SD3): a noise level s drawn by its `timestep_sampling` and
            shifted, x_s = (1 - s) x0 + s noise, the denoiser called on
            `[x_s, s * T]` and trained on the velocity noise - x0,
            unweighted (`FlowMatchSchedule.training_loss`), which fixes it
            too. Defaults to `NoiseSchedule()` (linear betas, T=1000).
        prediction_type: optional str, what the denoiser predicts:
            `"epsilon"` (the noise), `"v_prediction"` (the velocity) or
            `"sample"` (x_0). The objective is the schedule's
            (`NoiseSchedule(prediction_type=...)`, as diffusers' schedulers
            hold it); this argument, `loss_weighting` and `min_snr_gamma`
            set it on a copy of the `NoiseSchedule` (the caller's is left as
            it is). A schedule that holds another value than its default is
            refused, both named; a process that fixes what its network
            predicts (`EDMSchedule`, `FlowMatchSchedule`) refuses any other.
            Defaults to `None`: the schedule's (`"epsilon"` on the default
            `NoiseSchedule()`).
        loss_weighting: optional str, `"none"` (plain MSE) or `"min_snr"`
            (Min-SNR-gamma), set on the schedule as `prediction_type` is.
            Defaults to `None`: the schedule's (`"none"`).
        min_snr_gamma: optional float, the gamma of Min-SNR weighting, set
            on the schedule as `prediction_type` is. Defaults to `None`: the
            schedule's (`5.0`).
        ema_decay: float in [0, 1) or `None` to keep no EMA. Defaults to
            `0.999`.
        ema_warmup: bool, use the decay `min(ema_decay, (1 + n) / (10 + n))`
            after `n` updates, so early EMA weights follow the live ones.
            Defaults to `True`.
        num_classes: optional int, number of class labels of a conditional
            denoiser; read from `denoiser.num_classes` when it has one. Label
            `num_classes` is the "null" class used for guidance.
        class_dropout: float in [0, 1), probability of replacing a label by the
            null class in training (classifier-free guidance). Defaults to
            `0.0`.
        conditioning: optional `keras_diffusion.TextConditioning`: a text
            model, its denoiser called as `denoiser([x_t, t, context])` with
            `context` the text encoder's float32 `(batch, sequence_length,
            width)`; the encoder trains (and is averaged by the EMA) with
            the denoiser. Or a `keras_diffusion.FrozenTextConditioning`: a
            frozen pretrained encoder (keras-hub's CLIP, SD3's text encoders
            in `keras_diffusion.from_keras_hub`), its embeddings computed
            once per caption on the host, neither trained nor averaged.
            `fit` then takes `(images, texts)`, `generate` `prompts=`.
            Defaults to `None` (labels: `num_classes`).
        image_shape: optional `(H, W, C)`; needed only when the denoiser has
            no static input shape, as a subclassed model has.
        seed: optional int seeding the model's random stream. Defaults to
            `None` (drawn from the global seed, so `keras.utils.set_random_seed`
            makes runs reproducible).
        autoencoder: optional frozen autoencoder for latent diffusion, such as
            `keras_diffusion.latent.StableDiffusionAutoencoder`; the denoiser
            then works on its latents (`image_shape` is the latent shape).
            `fit` takes latents, or cached posterior moments (twice the latent
            channels, see `keras_diffusion.latent.encode_dataset`) from which
            each step draws a posterior sample on the device; latents have no
            [-1, 1] range check. `generate` decodes. Defaults to `None`.
        sampler: optional sampler (or its name or config, as
            `keras_diffusion.samplers.get` takes them) that `generate` uses
            when given none; saved with the model. `from_diffusers` sets it to
            the sampler of the checkpoint's scheduler. Defaults to `None`:
            the best measured for the schedule and prediction type
            (`keras_diffusion.models.sampler_choice.default_sampler`): on a
            `NoiseSchedule` `DPMSolverSampler(num_steps=20)`, or
            `DDIMSampler(num_steps=50)` for epsilon prediction; on an
            `EDMSchedule` `HeunSampler(num_steps=18)`; on a
            `FlowMatchSchedule` `DPMSolverSampler(num_steps=16)`. It is
            saved with the model, so a file keeps sampling as it did.
        posthoc_ema: optional list of relative widths (`sigma_rel`, each in
            (0, 0.28)): track a power-function EMA of each on the device
            (`keras_diffusion.averages.power_ema`), from whose snapshots any
            other width is chosen after training
            (`keras_diffusion.averages.posthoc`; a run writes the
            snapshots). EDM2 tracks `(0.05, 0.1)`. Defaults to `None`.
        guidance_scale: optional float, the classifier-free guidance the
            tools sample the model at when given none (`scripts/sample.py`,
            `scripts/evaluate.py`, `interop.load.load_for_sampling`); a run
            records its `--guidance-scale`. Saved with the model, so a file
            written anywhere (a post-hoc EMA's `--out`) keeps it; it wins
            over a run folder's `config.json`, which serves files that record
            none. `generate` samples a text model's prompts at it when given
            no `guidance_scale`, every other call at 1.0
            (`default_guidance_scale`).
            Defaults to `None`: none recorded.
        lora: optional `{"rank": R, "alpha": A, "layers": patterns}`: train
            low-rank adapters of the denoiser's layers and nothing else
            (`keras_diffusion.adapters.lora`): `keras_diffusion.enable_lora`
            sets it. Kept in the config, so that a file rebuilds the
            adapter. Defaults to `None`.
        controlnet: optional `keras_diffusion.ControlNet` of the denoiser
            (a `keras_diffusion.UNet`): spatial control. The denoiser and its
            condition are frozen (`trainable=False`), the ControlNet alone
            trains and is averaged; `fit` takes `(images, controls)` (or
            `(images, {"labels": labels, "control": controls})`), control
            images in [0, 1] (or uint8) of the ControlNet's
            `control_shape`, or, where the ControlNet has an `extractor`,
            the base model's data, each image's control made in the step
            (a text model's ControlNet needs an extractor);
            `generate`, `inpaint` and `img2img` take `control=` and
            `control_scale=`. `keras_diffusion.enable_controlnet` makes such
            a model from a trained one. Defaults to `None`.

    Example:

    ```python
    unet = keras_diffusion.UNet((16, 16, 1), widths=(16, 32), num_res_blocks=1)
    model = keras_diffusion.DiffusionModel(unet)
    model.compile(optimizer=keras.optimizers.Adam(2e-4))
    model.fit(images, epochs=10, batch_size=64)   # images in [-1, 1]
    samples = model.generate(16, seed=0)
    ```

    Reference:
        - [Ho et al., 2020](https://arxiv.org/abs/2006.11239)
        - [Salimans & Ho, 2022](https://arxiv.org/abs/2202.00512)
        - [Hang et al., 2023](https://arxiv.org/abs/2303.09556)
        - [Karras et al., 2022](https://arxiv.org/abs/2206.00364)
    """

    def __init__(
        self,
        denoiser,
        schedule=None,
        prediction_type=None,
        loss_weighting=None,
        min_snr_gamma=None,
        ema_decay=0.999,
        ema_warmup=True,
        num_classes=None,
        class_dropout=0.0,
        image_shape=None,
        seed=None,
        autoencoder=None,
        sampler=None,
        posthoc_ema=None,
        lora=None,
        guidance_scale=None,
        conditioning=None,
        controlnet=None,
        **kwargs,
    ):
        validation.check_constructor_args(
            denoiser=denoiser,
            schedule=schedule,
            ema_decay=ema_decay,
            class_dropout=class_dropout,
            ema_warmup=ema_warmup,
        )
        # The objective is the schedule's: the arguments set it on a copy. A
        # file saved before schedules held it records it in the model's
        # config, and comes through here.
        given = schedule is not None
        schedule = (schedule if given else NoiseSchedule()).with_objective(
            prediction_type, loss_weighting, min_snr_gamma, replace=not given
        )
        if num_classes is None:
            num_classes = getattr(denoiser, "num_classes", None)
        image_shape = validation.resolve_image_shape(denoiser, image_shape)
        conditioning = validation.resolve_conditioning(
            denoiser, conditioning, num_classes, class_dropout
        )
        validation.check_autoencoder(autoencoder, image_shape)
        posthoc_ema = check_sigma_rels("posthoc_ema", posthoc_ema)
        lora = lora_layers.check_lora("lora", lora)
        if guidance_scale is not None:
            guidance_scale = check_float("guidance_scale", guidance_scale)
        if controlnet is not None:
            controlled.check_controlnet(
                controlnet, denoiser, schedule, conditioning, (lora, autoencoder)
            )
        sampler = resolve_sampler(sampler, default=None)
        if sampler is not None:
            # Before anything is built; its steps are checked when it runs.
            sampler.check_process(schedule)
        positional = denoiser_calls.takes_positional_inputs(denoiser)
        # Before the EMA and the optimizer: they track the weights it makes
        # (the text encoder's are built by its example's encoding).
        example = None if conditioning is None else conditioning.example()
        denoiser_calls.build(
            denoiser, image_shape, example, positional, schedule.time_inputs
        )
        super().__init__(**kwargs)
        # How the denoiser is called (`denoiser_calls.takes_positional_inputs`).
        self.positional_inputs = positional

        self.denoiser = denoiser
        self.schedule = schedule
        self.ema_decay = None if ema_decay is None else float(ema_decay)
        self.ema_warmup = bool(ema_warmup)
        self.num_classes = num_classes
        self.class_dropout = float(class_dropout)
        self.conditioning = conditioning
        self.image_shape = image_shape
        self.seed = seed
        self.autoencoder = autoencoder
        self.sampler = sampler

        self.seed_generator = keras.random.SeedGenerator(seed, name="noise_seed")
        self.posthoc_ema = posthoc_ema
        self.lora = lora
        self.guidance_scale = guidance_scale
        if lora is not None:
            lora_layers.apply(denoiser, **lora)
            if conditioning is not None and conditioning.trainable_variables:
                conditioning.trainable = False  # frozen with the base
        self.controlnet = controlnet
        self.control_state = None
        if controlnet is not None:
            controlled.freeze(denoiser)
            if conditioning is not None and conditioning.trainable_variables:
                conditioning.trainable = False
            self.control_state = controlled.ControlState(denoiser)
        self.ema, self.power_ema = averages.build(
            self.averaged_variables, self.ema_decay, self.ema_warmup, posthoc_ema
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.trainer_state = TrainerState()
        self.sampling_state = SamplingState()
        self.built = True

    @property
    def prediction_type(self):
        """What the denoiser predicts: the schedule's `prediction_type`."""
        return self.schedule.prediction_type

    @property
    def conditional(self):
        return self.conditioning is not None

    @property
    def averaged_variables(self):
        """The weights trained and averaged (EMA, power EMA): the
        denoiser's, then a text encoder's, then a ControlNet's."""
        own = [] if self.conditioning is None else self.conditioning.trainable_variables
        control = [] if self.controlnet is None else self.controlnet.trainable_variables
        return self.denoiser.trainable_variables + list(own) + control

    @property
    def metrics(self):
        return [self.loss_tracker]

    def call(self, inputs, training=False):
        return self._call_denoiser(inputs, training)

    def _call_denoiser(self, inputs, training):
        return denoiser_calls.call(
            self.denoiser, inputs, training, self.positional_inputs
        )

    # Serialization.

    def save(self, filepath, *args, **kwargs):
        # Keras opens the file before it asks for the config: a model that
        # has none (`from_keras_hub`'s) is refused before anything is written.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras' own call gives them
            self.get_config()
        return super().save(filepath, *args, **kwargs)

    def save_own_variables(self, store):
        super().save_own_variables(store)
        random_state.save(store, self.seed_generator, self.denoiser)

    def load_own_variables(self, store):
        super().load_own_variables(random_state.weights_only(store))
        random_state.load(store, self.seed_generator, self.denoiser)

    def get_config(self):
        denoiser_calls.warn_if_unregistered(self.denoiser)
        config = super().get_config()
        config.update(
            {
                "denoiser": keras.saving.serialize_keras_object(self.denoiser),
                "schedule": keras.saving.serialize_keras_object(self.schedule),
                "ema_decay": self.ema_decay,
                "ema_warmup": self.ema_warmup,
                "num_classes": self.num_classes,
                "class_dropout": self.class_dropout,
                "image_shape": self.image_shape,
                "seed": self.seed,
            }
        )
        if self.posthoc_ema is not None:  # files without it load as before
            config["posthoc_ema"] = list(self.posthoc_ema)
        if self.lora is not None:
            config["lora"] = dict(self.lora)
        if self.guidance_scale is not None:  # files without it load as before
            config["guidance_scale"] = self.guidance_scale
        if self.conditional and self.conditioning.tokenizes:
            # Class labels keep `num_classes` and `class_dropout`, as before.
            config["conditioning"] = keras.saving.serialize_keras_object(
                self.conditioning
            )
        if self.autoencoder is not None:
            config["autoencoder"] = keras.saving.serialize_keras_object(
                self.autoencoder
            )
        if self.controlnet is not None:
            config["controlnet"] = keras.saving.serialize_keras_object(self.controlnet)
        # The default too: a later default leaves the file's samples alone.
        config["sampler"] = keras.saving.serialize_keras_object(self.sampler_for(None))
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        with warnings.catch_warnings():
            # Keras cannot rebuild a subclassed denoiser from its recorded
            # input shapes and says so; `__init__` builds it on a zero batch.
            warnings.filterwarnings(
                "ignore",
                message=".*cannot be built automatically",
                category=UserWarning,
            )
            config["denoiser"] = keras.saving.deserialize_keras_object(
                config["denoiser"]
            )
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        if config.get("conditioning") is not None:
            config["conditioning"] = keras.saving.deserialize_keras_object(
                config["conditioning"]
            )
        if isinstance(config.get("controlnet"), dict):  # or an instance, built
            config["controlnet"] = keras.saving.deserialize_keras_object(
                config["controlnet"]
            )
        if "sampler" not in config:
            # A file written before the model saved its default sampler.
            config["sampler"] = legacy_default_sampler(config["schedule"])
        if config.get("autoencoder") is not None:
            # No import of `keras_diffusion.latent` here (it sits above
            # models/): importing it registers `StableDiffusionAutoencoder`,
            # `keras_diffusion/__init__.py` imports it, and Python runs that
            # file before any submodule of the package, this one included.
            # keras-cv itself is imported only when an autoencoder is built.
            config["autoencoder"] = keras.saving.deserialize_keras_object(
                config["autoencoder"]
            )
        return cls(**config)
