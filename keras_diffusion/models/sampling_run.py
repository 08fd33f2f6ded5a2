"""The sampling arguments `generate` and the edits share, and the null of
their guidance."""

from keras_diffusion.models import controlled


class SamplingRun:
    """The sampling arguments `generate` and the edits share."""

    def __init__(
        self,
        sampler,
        condition,
        guidance_scale,
        seed,
        batch_size,
        use_ema,
        negative=None,
        control=(None, 1.0),
    ):
        self.sampler = sampler
        # The labels, or a text model's prompts, and its negative prompts.
        self.condition = condition
        self.negative = negative
        self.guidance_scale = guidance_scale
        self.seed = seed
        self.batch_size = batch_size
        self.use_ema = use_ema
        # A ControlNet's control images and the scale of its residuals.
        self.control, self.control_scale = control

    def checked_control(self, model, num_images):
        """`(control images or None, control scale)`, checked: required by
        a model with a ControlNet, refused by any other."""
        if model.controlnet is None:
            if self.control is not None or self.control_scale != 1.0:
                given = "control" if self.control is not None else "control_scale"
                raise ValueError(
                    f"Argument `{given}` needs a model with a ControlNet "
                    "(keras_diffusion.enable_controlnet); this one has none. "
                    f"Received: {given}="
                    f"{'images' if given == 'control' else self.control_scale}"
                )
            return None, 1.0
        scale = controlled.check_control_scale(self.control_scale)
        shape = model.controlnet.control_shape
        return controlled.check_control_images(self.control, shape, num_images), scale


def null_condition(model, run, num_images):
    """What guidance steers from: the null condition of `num_images` images
    (the null class, the empty prompt), or a text model's negative prompts;
    `None` for an unconditional model."""
    if not model.conditional:
        return None
    if run.negative is not None:
        if model.schedule.guidance_input:
            raise ValueError(
                "Argument `negative_prompts` needs the two branches of "
                "classifier-free guidance; this model's process takes the "
                "guidance scale as an input and makes one call (train with "
                "`guidance_max=1`, --guidance-max 1, for negative prompts). "
                f"Received: negative_prompts={run.negative!r}"
            )
        return model.conditioning.check_negative(run.negative, num_images)
    return model.conditioning.null(num_images)
