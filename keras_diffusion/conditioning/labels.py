"""Class labels as a model's condition: the null is label `num_classes`."""

import numpy as np
from keras import ops

from keras_diffusion.conditioning.dropout import dropped

# Why a conditional model without a null class has no guidance.
NO_NULL_CLASS = (
    "a null class, label num_classes, for the unconditional branch; this "
    "denoiser has none (UNet(null_class=False), as diffusers' models load: "
    "their num_class_embeds are all classes), so it samples each class "
    "conditionally only"
)


class ClassLabels:
    """Class labels `0 .. num_classes - 1`, the denoiser's third input as
    they are; label `num_classes` is the null of classifier-free guidance.

    What `DiffusionModel(num_classes=, class_dropout=)` makes: it has no
    weights, and the model's config keeps its `num_classes` and
    `class_dropout` (files of earlier releases load as they were).

    Args:
        num_classes: int, the classes.
        dropout: float in [0, 1), the share of training labels replaced by
            the null (`class_dropout`). Defaults to `0.0`.
        null_class: bool, whether the denoiser has the null class (a
            `UNet(null_class=False)` has none: no guidance). Defaults to
            `True`.
    """

    argument = "labels"
    input_dtype = "int32"
    tokenizes = False
    trainable_variables = ()

    def __init__(self, num_classes, dropout=0.0, null_class=True):
        self.num_classes = int(num_classes)
        self.dropout = float(dropout)
        self.null_class = bool(null_class)

    def example(self):
        """The denoiser's third input for its build call: one label 0."""
        return ops.zeros((1,), "int32")

    def check(self, labels, num_images, guidance_scale):
        """`generate`'s `labels` checked on the host: `(labels, guided)`, the
        labels an int32 array of `num_images` or `None` (drawn by
        `prepare`)."""
        unconditional = isinstance(labels, str) and labels == "unconditional"
        if not self.null_class and (guidance_scale != 1.0 or unconditional):
            what = "guidance_scale" if guidance_scale != 1.0 else "labels"
            value = guidance_scale if guidance_scale != 1.0 else labels
            raise ValueError(
                f"Classifier-free guidance and labels='unconditional' need "
                f"{NO_NULL_CLASS}. Received: {what}={value!r}"
            )
        if labels is None:
            return None, guidance_scale != 1.0
        if isinstance(labels, str):
            return self._unconditional(labels, num_images, guidance_scale)
        array = np.asarray(labels)
        if array.ndim == 0:
            array = np.full((num_images,), array)
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(
                f"Argument `labels` must be integers. Received: labels={labels!r}"
            )
        if array.shape != (num_images,):
            raise ValueError(
                "Argument `labels` must be an int or have length "
                f"num_images={num_images}. Received: labels of shape {array.shape}"
            )
        if array.min() < 0 or array.max() >= self.num_classes:
            raise ValueError(
                f"Argument `labels` must lie in [0, {self.num_classes}). "
                f"Received: labels in [{array.min()}, {array.max()}]"
            )
        return array.astype(np.int32), guidance_scale != 1.0

    def _unconditional(self, labels, num_images, guidance_scale):
        if labels != "unconditional":
            raise ValueError(
                "Argument `labels` must be None, 'unconditional', an int or a "
                f"sequence of ints. Received: labels={labels!r}"
            )
        if guidance_scale != 1.0:
            raise ValueError(
                "Guidance needs class labels; 'unconditional' samples the null "
                f"class alone. Received: labels='unconditional', "
                f"guidance_scale={guidance_scale}"
            )
        return self.null(num_images), False

    def prepare(self, labels, num_images, seed):
        """The labels of `generate` on the host: those checked, else each
        image's class drawn uniformly from `seed`."""
        if labels is not None:
            return labels
        rng = np.random.default_rng([int(seed) % 2**31, 1])
        return rng.integers(0, self.num_classes, num_images, dtype=np.int32)

    def null(self, count):
        """The null condition of `count` images: label `num_classes`."""
        return np.full((count,), self.num_classes, np.int32)

    def in_step(self, labels, batch, seed, training):
        """The denoiser's third input in the train step: the labels, each
        replaced by the null with probability `dropout` when `training`
        (from the stateless `seed`), `batch` the batch's size."""
        labels = ops.cast(labels, "int32")
        if training and self.dropout > 0.0:
            drop = dropped(batch, seed, self.dropout, training)
            labels = ops.where(drop, self.num_classes, labels)
        return labels

    def null_in_step(self, batch, training):
        """The denoiser's third input for the null of `batch` examples in
        the train step (`None` without a null class)."""
        if not self.null_class:
            return None
        return ops.full((batch,), self.num_classes, "int32")

    def encode(self, labels, values=None):
        """The denoiser's third input from prepared labels: themselves."""
        return ops.cast(labels, "int32")
