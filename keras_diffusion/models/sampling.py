"""Sampling with a `DiffusionModel`: `generate` and the compiled loops behind it.

`SamplingMixin` reads the model's public attributes (its denoiser, schedule,
EMA, `positional_inputs`, `call`) and keeps its own state in one object the
model holds, `sampling_state` (a `SamplingState`). The edits
(`keras_diffusion.models.editing`) sample through `sample_run`.
"""

import functools
import json
import random
import warnings

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_diffusion.conditioning import conditioned_on_text
from keras_diffusion.models import controlled, validation
from keras_diffusion.models import denoiser as denoiser_calls
from keras_diffusion.models.sampler_choice import default_sampler, resolve_sampler
from keras_diffusion.models.sampling_run import SamplingRun, null_condition
from keras_diffusion.samplers import loop
from keras_diffusion.trainers import xla
from keras_diffusion.utils.checks import check_bool


class SamplingState:
    """What sampling keeps between calls.

    Attributes:
        functions: the compiled loops, by sampler configuration and form.
        xla_failed: bool, XLA could not compile a loop: sample without it.
        warned_terminal_signal: bool, the warning of a schedule that keeps
            signal at its last timestep was given.
    """

    def __init__(self):
        self.functions = {}
        self.xla_failed = False
        self.warned_terminal_signal = False


class SamplingMixin:
    """`DiffusionModel`'s sampling methods, on its schedule, EMA and denoiser.

    One compiled loop a sampler configuration (a `tf.function`, with XLA
    when the training step uses it) draws a batch from noise; `generate`
    runs it over batches and returns NumPy images.
    """

    def denoise(
        self, x_t, t, labels=None, use_ema=True, control=None, control_scale=1.0
    ):
        """One denoiser evaluation, with the EMA weights when `use_ema`;
        `labels` is the denoiser's third input (labels, or a text model's
        encoded prompts); with a `controlnet`, `control` the control images
        and `control_scale` the weight of its residuals (without `control`,
        the frozen base's prediction)."""
        inputs = [ops.cast(x_t, "float32"), ops.cast(t, "float32")]
        if labels is not None:
            inputs.append(ops.cast(labels, self.conditioning.input_dtype))
        averaged = use_ema and self.ema is not None
        if self.controlnet is not None and control is not None:
            values = None
            if averaged:
                count = len(self.controlnet.trainable_variables)
                values = self.ema.values()[-count:] if count else []
            outputs = controlled.controlled_call(
                self, inputs, control, control_scale, False, values
            )
        elif averaged:
            outputs = denoiser_calls.stateless_call(
                self.denoiser,
                self.ema.values()[: len(self.denoiser.trainable_variables)],
                [v.value for v in self.denoiser.non_trainable_variables],
                inputs,
                self.positional_inputs,
            )
        else:
            outputs = self.call(inputs, training=False)
        return ops.cast(outputs, "float32")

    def encode_condition(self, condition, use_ema=True):
        """The denoiser's third input from a prepared condition (labels, or
        a text model's tokens, encoded with the EMA's weights when
        `use_ema`)."""
        values = None
        own = self.conditioning.trainable_variables
        if use_ema and self.ema is not None and own:
            values = self.ema.values()[len(self.denoiser.trainable_variables) :]
        return self.conditioning.encode(condition, values)

    def _denoise_fn(self, conditions, guidance_scale, guided, use_ema, control_scale):
        """`denoise_fn(x_t, t)` of the samplers: the model, conditional on
        the condition of `conditions` (`(condition, null, control)`), with
        classifier-free guidance against the null (the null condition, or a
        negative prompt) when `guided`, a ControlNet's control in both
        branches; one call at the scale where the process gives the network
        the guidance scale (`Process.guidance_input`)."""
        condition, null, control = conditions
        schedule = self.schedule

        def denoise(x_t, t, labels=None, control=control):
            time = schedule.guided_time(t, guidance_scale)
            return self.denoise(x_t, time, labels, use_ema, control, control_scale)

        if not self.conditional:
            return denoise
        condition = self.encode_condition(condition, use_ema)
        if not guided or schedule.guidance_input:
            return lambda x_t, t: denoise(x_t, t, condition)
        # Conditional and unconditional branches in one batch.
        both = ops.concatenate([condition, self.encode_condition(null, use_ema)], 0)
        doubled = None if self.controlnet is None else ops.concatenate([control] * 2, 0)

        def denoise_fn(x_t, t):
            out = self.denoise(
                ops.concatenate([x_t, x_t], axis=0),
                ops.concatenate([t, t], axis=0),
                both,
                use_ema,
                doubled,
                control_scale,
            )
            cond, uncond = ops.split(out, 2, axis=0)
            return uncond + guidance_scale * (cond - uncond)

        return denoise_fn

    def _sample_function(self, sampler, guided, use_ema, decode=False, edit=None):
        """The compiled `run(x_T, condition, null, control, guidance_scale,
        control_scale, seed, *inputs)`;
        `edit` is `None` (from noise), `("inpaint",)` (inputs: the images
        and the keep mask) or `("img2img", begin_step)` (inputs: the
        images), see `keras_diffusion.samplers.loop.Edit`."""
        # Keyed by the sampler's configuration, not its identity: a new but
        # equal sampler on each call reuses the traced loop.
        config = json.dumps(sampler.get_config(), sort_keys=True)
        jit = self._sampling_uses_xla()
        key = (type(sampler), config, guided, use_ema, decode, jit, edit)
        functions = self.sampling_state.functions
        if key not in functions:

            def run(
                x_T,
                condition,
                null,
                control,
                guidance_scale,
                control_scale,
                seed,
                *inputs,
            ):
                denoise_fn = self._denoise_fn(
                    (condition, null, control),
                    guidance_scale,
                    guided,
                    use_ema,
                    control_scale,
                )
                x0 = sampler.sample(
                    denoise_fn,
                    x_T,
                    self.schedule,
                    self.prediction_type,
                    seed=seed,
                    edit=_edit(edit, inputs, seed),
                )
                return self.autoencoder.decode(x0) if decode else x0

            # The sampler loop is an explicit tf.while_loop: no autograph.
            functions[key] = tf.function(
                run, reduce_retracing=True, autograph=False, jit_compile=jit
            )
        return functions[key]

    def _sampling_uses_xla(self):
        """XLA for `generate` as for the step: `compile`'s choice, else auto."""
        if self.sampling_state.xla_failed:
            return False
        if self.compiled:
            return bool(self.jit_compile)
        return xla.resolve_jit_compile("auto")

    def _run_sampling(self, sampler, guided, use_ema, decode, edit, *args):
        def call():
            return self._sample_function(sampler, guided, use_ema, decode, edit)(*args)

        if not self._sampling_uses_xla():
            return call()

        def fall_back():
            self.sampling_state.xla_failed = True
            return call()

        return xla.call_with_fallback(call, fall_back, "the sampling loop")

    def generate(
        self,
        num_images,
        sampler=None,
        labels=None,
        guidance_scale=None,
        seed=None,
        batch_size=None,
        use_ema=True,
        verbose="auto",
        decode=True,
        prompts=None,
        negative_prompts=None,
        control=None,
        control_scale=1.0,
    ):
        """Samples images from noise in one compiled loop per batch.

        Args:
            num_images: int >= 1.
            sampler: a sampler from `keras_diffusion.samplers`, or its name
                or config as `keras_diffusion.samplers.get` takes them
                (`"ddim"`, `"ddpm"`, `"dpm"`, `"euler"`, `"heun"`, with that
                sampler's default steps). Defaults to the model's `sampler`,
                else `HeunSampler(num_steps=18)` on an `EDMSchedule`,
                `DPMSolverSampler(num_steps=16)` on a `FlowMatchSchedule`, and
                on a `NoiseSchedule` `DPMSolverSampler(num_steps=20)`
                (`DDIMSampler(num_steps=50)` for epsilon prediction): see
                `default_sampler`.
            labels: for a conditional model, an int or a sequence of
                `num_images` ints in `[0, num_classes)`; `None` draws each
                image's class uniformly at random (from `seed`), so the
                images sample the whole data set as class-conditional
                samples do; `"unconditional"` samples the null class, the
                model's unconditional branch (trained on the `class_dropout`
                share of batches, so weaker). Defaults to `None`. A text
                model refuses labels.
            guidance_scale: float, classifier-free guidance weight `w` in
                `eps_u + w (eps_c - eps_u)`; `1.0` is plain conditional
                sampling. Defaults to `None`: a text model given `prompts`
                samples at the guidance its run recorded (the model's
                `guidance_scale`, as keras-hub's and diffusers' text
                pipelines guide by default), every other call at `1.0`
                (`default_guidance_scale`).
            seed: optional int; the same seed gives the same images.
            batch_size: images per compiled call. Defaults to all at once, up
                to 256.
            use_ema: bool, sample with the EMA weights. Defaults to `True`.
            verbose: `"auto"`, 0 or 1: show a progress bar over batches when
                there is more than one. Defaults to `"auto"`.
            decode: bool, with an autoencoder: decode the latents (in the
                same compiled call) rather than return them. Defaults to
                `True`.
            prompts: for a text model (`conditioning=TextConditioning(...)`),
                a str for every image or a sequence of `num_images` str;
                `None` is the empty prompt, the model's unconditional branch
                (trained on the caption dropout's share). Defaults to `None`.
            negative_prompts: for a text model, what guidance steers away
                from: a str or `num_images` str in place of the empty
                prompt, `eps_neg + w (eps_c - eps_neg)`. Defaults to `None`.
            control: with a `controlnet`, the control images: float in
                [0, 1] (or uint8) of the ControlNet's `control_shape`, one
                for every image or `num_images`; the same in both branches
                of guidance. Defaults to `None` (refused on such a model).
            control_scale: float >= 0, the weight of the ControlNet's
                residuals; `0` is the base model. Defaults to `1.0`.

        Returns:
            NumPy float32 array `(num_images, H, W, C)` in [-1, 1]; with an
            autoencoder, decoded images of its `image_shape` (the latents,
            unclipped, when `decode=False`).
        """
        sampler = self.sampler_for(sampler)
        check_bool("decode", decode)
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale(prompts)
        run = SamplingRun(
            sampler,
            validation.pick_condition(self, labels, prompts, negative_prompts),
            guidance_scale,
            seed,
            batch_size,
            use_ema,
            negative_prompts,
            (control, control_scale),
        )
        return self.sample_run(run, num_images, verbose, decode)

    def default_guidance_scale(self, prompts=None):
        """The guidance `generate` samples at when given none: with
        `prompts`, a text model's recorded `guidance_scale` (its run's: on
        the captioned emoji guidance 2 put more images in their caption's
        category than 1, docs/quality.md, "Text"); else `1.0`, a
        class-label model's plain conditional sampling, and the empty
        prompt's (whose guidance would change nothing)."""
        if (
            prompts is None
            or not conditioned_on_text(self)
            or self.guidance_scale is None
        ):
            return 1.0
        return self.guidance_scale

    def sampler_for(self, sampler=None):
        """The `Sampler` that `generate` runs for its `sampler` argument:
        itself, or the one its name or config makes; `None` is the model's
        own `sampler`, else the process's default (`default_sampler`)."""
        default = self.sampler
        if default is None:
            default = default_sampler(self.schedule, self.prediction_type)
        return resolve_sampler(sampler, default)

    def sample_run(self, run, num_images, verbose, decode=True, edit=None, inputs=()):
        """The images of `generate` and the edits: checks `run`'s arguments
        (a `SamplingRun`), then samples in batches. `edit` is `None` (from
        noise), `("inpaint",)` or `("img2img", begin_step)` (see
        `_sample_function`); `inputs`: NumPy arrays of `num_images` rows,
        each batch's rows passed to the compiled loop."""
        condition, guided, batch_size = validation.check_generate_args(
            self,
            num_images,
            run.sampler,
            run.condition,
            run.guidance_scale,
            run.batch_size,
            run.seed,
        )
        null = null_condition(self, run, num_images)
        control, control_scale = run.checked_control(self, num_images)
        latent = self.autoencoder is not None
        decode = latent and decode
        if decode and run.batch_size is None:
            # The decoder's activations at full resolution bound the batch.
            batch_size = min(batch_size, 16)
        run.sampler.validate(self.schedule)
        self._warn_if_terminal_signal()
        seed = random.randint(0, 2**31 - 1) if run.seed is None else run.seed
        if self.conditional:
            condition = self.conditioning.prepare(condition, num_images, seed)
        sample = functools.partial(
            self._run_sampling, run.sampler, guided, run.use_ema, decode, edit
        )
        images = self._sample_batches(
            sample,
            num_images,
            batch_size,
            (condition, null, control),
            (run.guidance_scale, control_scale),
            seed,
            verbose,
            inputs,
        )
        if latent:  # decoded images are clipped by the decoder; latents not
            return images
        return np.clip(images, -1.0, 1.0)

    def _sample_batches(
        self,
        sample,
        num_images,
        batch_size,
        conditions,
        scales,
        seed,
        verbose,
        inputs=(),
    ):
        """`generate`'s images, unclipped: `sample(x_T, condition, null,
        control, guidance_scale, control_scale, seed, *inputs)` (one
        compiled call) a batch, batch `index` from noise seeded by `(seed,
        index)`, with that batch's rows of `inputs` and of `conditions` (the
        condition, its null and the control images, each an array of
        `num_images` rows or `None`); `scales` the guidance and control
        scales."""
        num_batches = -(-num_images // batch_size)
        progress = None
        if verbose == 1 or (verbose == "auto" and num_batches > 1):
            progress = keras.utils.Progbar(num_images, unit_name="image")
        outputs = []
        for index in range(num_batches):
            start = index * batch_size
            size = min(batch_size, num_images - start)
            batch_seed = tf.constant([int(seed) % (2**31), index], dtype="int32")
            x_T = tf.random.stateless_normal(
                (size,) + tuple(self.image_shape),
                seed=tf.random.experimental.stateless_fold_in(batch_seed, 7),
            )
            # Labels and token ids are int32, embeddings float32.
            batch_conditions = [
                tf.constant(c[start : start + size])
                if c is not None
                else tf.zeros((size,), "int32")
                for c in conditions
            ]
            x0 = sample(
                x_T,
                *batch_conditions,
                *(tf.constant(scale, "float32") for scale in scales),
                batch_seed,
                *(tf.constant(a[start : start + size]) for a in inputs),
            )
            outputs.append(ops.convert_to_numpy(x0))
            if progress is not None:
                progress.add(size)
        return np.concatenate(outputs, axis=0).astype(np.float32)

    def _warn_if_terminal_signal(self):
        abar_T = self.schedule.terminal_signal
        if abar_T > 1e-2 and not self.sampling_state.warned_terminal_signal:
            self.sampling_state.warned_terminal_signal = True
            warnings.warn(
                f"The schedule keeps signal at its last timestep (alphas_cumprod"
                f"[-1] = {abar_T:.3g} > 0.01) but sampling starts from pure "
                "noise, so samples will be off. Cures: more timesteps, "
                "beta_schedule='cosine', or rescale_zero_terminal_snr=True with "
                "prediction_type='v_prediction'.",
                stacklevel=3,
            )


def output_shape(model):
    """The shape of the images `model.generate` returns (decoded, for a
    model with an autoencoder)."""
    autoencoder = getattr(model, "autoencoder", None)
    shape = (autoencoder if autoencoder is not None else model).image_shape
    return tuple(int(d) for d in shape)


def _edit(edit, inputs, seed):
    """The `loop.Edit` of a compiled call's `edit` key and inputs, its noise
    from the batch's seed."""
    if edit is None:
        return None
    edit_seed = tf.random.experimental.stateless_fold_in(seed, 11)
    if edit[0] == "inpaint":
        images, keep = inputs
        return loop.Edit(images, keep, 0, edit_seed)
    (images,) = inputs
    return loop.Edit(images, None, edit[1], edit_seed)
