"""Control images made from the training images themselves, in the train
step (on the device): a ControlNet's `extractor`.

Each extractor maps images `(batch, H, W, C)` in [-1, 1] to a control
`(batch, H, W, 1)` of 0s and 1s:

- `"silhouette"`: the pixels away from the background (an RGBA image's
  alpha, once composited over the folder's `--background`; the digits' ink
  on black): any channel further than `threshold` from `background`;
- `"edges"`: the Sobel gradient's magnitude of the grey image over
  `threshold`.
"""

import numpy as np
from keras import ops

from keras_diffusion.utils.checks import check_choice, check_float

# The defaults of each extractor's options, in [-1, 1] units.
EXTRACTORS = {
    # 0.2 is 26 of 255 levels: the soft edge of an anti-aliased sprite is in.
    "silhouette": {"background": -1.0, "threshold": 0.2},
    # The magnitude of a step from -1 to 1 is 8 on the kernel's weights; half.
    "edges": {"threshold": 1.0},
}

_SOBEL_X = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]], np.float32)


def check_extractor(extractor, argument="extractor"):
    """`None`, or an extractor's name or `{"name": ..., **options}` ->
    `None` or a dict with every option."""
    if extractor is None:
        return None
    if isinstance(extractor, str):
        extractor = {"name": extractor}
    if not isinstance(extractor, dict) or "name" not in extractor:
        raise TypeError(
            f"Argument `{argument}` must be None, an extractor's name "
            f"({', '.join(EXTRACTORS)}) or a dict with its name and options. "
            f"Received: {argument}={extractor!r}"
        )
    name = check_choice(argument, extractor["name"], tuple(EXTRACTORS))
    options = dict(EXTRACTORS[name])
    unknown = sorted(set(extractor) - set(options) - {"name"})
    if unknown:
        raise ValueError(
            f"The {name} extractor takes {sorted(options)}. Received: "
            f"{argument} with {unknown}"
        )
    for key in options:
        if key in extractor:
            value = extractor[key]
            if key == "background" and isinstance(value, (list, tuple)):
                options[key] = [check_float(key, v, -1.0, 1.0) for v in value]
            else:
                options[key] = check_float(key, value)
    return {"name": name, **options}


def extract(extractor, images):
    """The control of `images` (float `(batch, H, W, C)` in [-1, 1]) by a
    checked `extractor` (`check_extractor`): float32 `(batch, H, W, 1)`."""
    images = ops.cast(images, "float32")
    if extractor["name"] == "silhouette":
        return silhouette(images, extractor["background"], extractor["threshold"])
    return edges(images, extractor["threshold"])


def silhouette(images, background=-1.0, threshold=0.2):
    """1 where any channel of `images` is further than `threshold` from
    `background` (a value, or one a channel), else 0."""
    background = ops.reshape(ops.convert_to_tensor(background, "float32"), (-1,))
    away = ops.max(ops.abs(images - background), axis=-1, keepdims=True)
    return ops.cast(away > threshold, "float32")


def edges(images, threshold=1.0):
    """1 where the Sobel gradient of the grey image (the channels' mean) is
    over `threshold`, else 0; the border padded by its own pixels."""
    grey = ops.mean(images, axis=-1, keepdims=True)
    padded = ops.pad(grey, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="symmetric")
    kernels = np.stack([_SOBEL_X, _SOBEL_X.T], axis=-1)[:, :, None, :]
    gradients = ops.conv(padded, ops.convert_to_tensor(kernels), padding="valid")
    magnitude = ops.sqrt(ops.sum(ops.square(gradients), axis=-1, keepdims=True))
    return ops.cast(magnitude > threshold, "float32")
