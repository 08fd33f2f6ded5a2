"""The sampling arguments `generate` and the edits share, and the null of
their guidance."""


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
    ):
        self.sampler = sampler
        # The labels, or a text model's prompts, and its negative prompts.
        self.condition = condition
        self.negative = negative
        self.guidance_scale = guidance_scale
        self.seed = seed
        self.batch_size = batch_size
        self.use_ema = use_ema


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
