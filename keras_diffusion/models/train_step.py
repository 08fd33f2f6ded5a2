"""The train step of `DiffusionModel`: one batch's loss on the device, the
optimizer's update and the averages' (`train_step`), and its evaluation
(`test_step`)."""

import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning import dropout
from keras_diffusion.distribute import strategy as distribute
from keras_diffusion.models import controlled, validation
from keras_diffusion.models.text_checks import (
    check_text_fit_data,
    check_text_validation,
    text_pair,
)
from keras_diffusion.schedules.process import TrainingStep


class TrainStepMixin:
    """`DiffusionModel`'s training: `diffusion_loss`, `train_step`,
    `test_step` and `fit`'s data checks.

    It reads the model's `denoiser` (called through `_call_denoiser`),
    `schedule`, `seed_generator`, `conditional`, `conditioning`,
    `averaged_variables`, `image_shape`, `autoencoder`, `optimizer`, `ema`,
    `power_ema` and `loss_tracker`; `fit` and `evaluate` go on to the
    trainer's.
    """

    def _unpack(self, data):
        """A batch -> `(images, labels, control)`; `labels` and `control`
        `None` where the model takes none."""
        control = None
        if self.controlnet is None:
            images, labels = validation.split_batch(data, self.conditional)
        else:
            images, labels, control = controlled.unpack(self, data)
        validation.check_image_spec(
            images, self.image_shape, latent=self.autoencoder is not None
        )
        return images, labels, control

    def _replica_seed(self):
        return distribute.replica_seed(self.seed_generator.next())

    def diffusion_loss(
        self, images, labels=None, seed=None, training=False, control=None
    ):
        """The weighted denoising loss of one batch, a float32 scalar.

        Args:
            images: float tensor `(batch, H, W, C)` in [-1, 1]; with an
                autoencoder, latents or posterior moments `(batch, H, W, 2C)`.
            labels: int tensor `(batch,)` for a class-conditional model, int
                token ids `(batch, sequence_length)` for a text model, else
                `None`.
            seed: int32 tensor of shape `(2,)`, the stateless seed of this
                step's timesteps (noise levels on an `EDMSchedule` or a
                `FlowMatchSchedule`), noise
                and label (caption) dropout.
            training: bool, passed to the denoiser; also enables label
                (caption) dropout.
            control: with a `controlnet`, the control images, float
                `(batch, *controlnet.control_shape)` in [0, 1].
        """
        if seed is None:
            seed = self._replica_seed()
        t_seed, noise_seed, drop_seed = tf.unstack(
            tf.random.experimental.stateless_split(seed, 3)
        )
        x0 = self._latents(images, seed)
        batch = ops.shape(x0)[0]
        unconditional = None
        if self.conditional:
            # Labels as they are, or a text model's encoded tokens; each
            # dropped to the null at the conditioning's rate when training.
            labels = self.conditioning.in_step(labels, batch, drop_seed, training)
            unconditional = self._unconditional(batch, drop_seed, training)
        else:
            labels = None
        call = self._call_denoiser
        if self.controlnet is not None:

            def call(inputs, training):
                return controlled.controlled_call(self, inputs, control, 1.0, training)

        step = TrainingStep(
            x0,
            labels,
            (t_seed, noise_seed),
            training,
            call,
            iteration=self._updates(),
            unconditional=unconditional,
        )
        return self.schedule.training_loss(step)

    def _unconditional(self, batch, drop_seed, training):
        """`TrainingStep.unconditional`: the null of the batch and the
        examples dropped to it, built only where the process asks."""
        conditioning = self.conditioning

        def null_and_dropped():
            null = conditioning.null_in_step(batch, training)
            if null is None:  # no null class: no unconditional branch
                return None, None
            rate = conditioning.dropout
            return null, dropout.dropped(batch, drop_seed, rate, training)

        return null_and_dropped

    def _updates(self):
        """The optimizer's update count; 0 before `compile`."""
        optimizer = getattr(self, "optimizer", None)
        return 0 if optimizer is None else optimizer.iterations

    def _latents(self, images, seed):
        x0 = ops.cast(images, "float32")
        if self.autoencoder is None or x0.shape[-1] == self.image_shape[-1]:
            return x0
        # Moments: a posterior sample, from its own stream of the step's seed.
        posterior_seed = tf.random.experimental.stateless_fold_in(seed, 1)
        return self.autoencoder.sample_latents(x0, posterior_seed)

    def _replica_loss(self, batch, seed, share, training):
        images, labels, control = batch
        return distribute.replica_loss(
            share,
            lambda: self.diffusion_loss(images, labels, seed, training, control),
        )

    @property
    def _takes_text(self):
        return self.conditional and self.conditioning.tokenizes

    def fit(self, x=None, y=None, **kwargs):
        latent = self.autoencoder is not None
        if self._takes_text:
            x, y = text_pair(x, y)
            check_text_fit_data(self.conditioning, x, y, self.image_shape, latent)
            check_text_validation(
                self.conditioning,
                kwargs.get("validation_data"),
                self.image_shape,
                latent,
            )
        elif self.controlnet is not None:
            controlled.check_control_fit_data(self, x, y)
        else:
            validation.check_fit_data(x, y, self.image_shape, self.num_classes, latent)
        return super().fit(x, y, **kwargs)  # the trainer's (`trainers/`)

    def evaluate(self, x=None, y=None, **kwargs):
        if self._takes_text:
            # Every form `fit` takes; the trainer tokenizes them as it does.
            x, y = text_pair(x, y)
            check_text_fit_data(
                self.conditioning,
                x,
                y,
                self.image_shape,
                self.autoencoder is not None,
                method="evaluate",
            )
        return super().evaluate(x, y, **kwargs)  # the trainer's (`trainers/`)

    def train_step(self, data):
        batch = self._unpack(data)
        seed = self._replica_seed()
        share = distribute.batch_share(batch[0])
        variables = self.averaged_variables
        with tf.GradientTape() as tape:
            loss = self._replica_loss(batch, seed, share, training=True)
            # Gradients are summed over replicas, and tf.distribute splits an
            # indivisible global batch unevenly (5 -> 3 + 2): weighting each
            # replica's mean by its share of the batch makes the sum the mean
            # over the global batch, the update of a single device.
            weighted = loss if share is None else loss * share
            scaled_loss = self.optimizer.scale_loss(weighted)
        gradients = tape.gradient(scaled_loss, variables)
        # `iterations` counts updates: an optimizer that accumulates
        # gradients moves the weights once in K steps, and the EMA with them.
        before = ops.copy(self.optimizer.iterations)
        self.optimizer.apply(gradients, variables)
        applied = self.optimizer.iterations > before
        for average in (self.ema, self.power_ema):
            if average is not None:
                average.update(variables, applied)
        self.loss_tracker.update_state(loss, sample_weight=share)
        return self._logs()

    def test_step(self, data):
        batch = self._unpack(data)
        seed = self._replica_seed()
        share = distribute.batch_share(batch[0])
        loss = self._replica_loss(batch, seed, share, training=False)
        self.loss_tracker.update_state(loss, sample_weight=share)
        return self._logs()

    def _logs(self):
        loss = self.loss_tracker.result()
        if distribute.is_multi_worker(self.distribute_strategy):
            # Keras reduces step logs across workers along axis 0, which a
            # scalar lacks (tensorflow/tensorflow#72388).
            loss = ops.reshape(loss, (1,))
        return {"loss": loss}
