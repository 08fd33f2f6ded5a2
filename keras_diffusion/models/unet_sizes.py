"""Named U-Net sizes, `"tiny"` to `"large"`, laid out for an image size.

The number of levels follows the image: the U-Net halves the resolution down
to 4x4 for small images and 8x8 for larger ones (as DDPM and ADM do), and
widths grow `(1, 2, 4, 4, ...)` times the size's base width. The sizes differ
in base width, residual blocks per level and self-attention (at 16x16, and
also 8x8 for `"large"`):

| size | base width | blocks | attention | 16x16 | 32x32 | 64x64 |
|---|---:|---:|---|---:|---:|---:|
| tiny | 16 | 1 | none | 0.62 M | 1.02 M | 1.02 M |
| small | 32 | 1 | 16x16 | 2.48 M | 4.11 M | 4.26 M |
| base | 64 | 2 | 16x16 | 14.2 M | 24.1 M | 25.0 M |
| large | 128 | 2 | 16x16, 8x8 | 58.2 M | 101.4 M | 106.4 M |

(Parameters of an unconditional RGB model; `tests/models/unet_sizes_test.py`
checks the table.)
"""

from keras_diffusion.utils.checks import check_choice

MODEL_SIZES = ("tiny", "small", "base", "large")
# The default of an image folder, by the machine: on two CPU cores a step of
# 256 RGB images at 64x64 takes ~11 s for "tiny" and ~37 s for "small"
# (README), so anything bigger would leave a CPU user waiting for days.
DEFAULT_MODEL_SIZES = {"cpu": "tiny", "gpu": "base"}


def gpu_present():
    """Whether TensorFlow sees a GPU: folder runs default by the machine."""
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def default_model_size():
    """`"base"` where TensorFlow sees a GPU, else `"tiny"`."""
    return DEFAULT_MODEL_SIZES["gpu" if gpu_present() else "cpu"]


_SETTINGS = {
    # size: (base width, residual blocks per level, attention resolutions)
    "tiny": (16, 1, ()),
    "small": (32, 1, (16,)),
    "base": (64, 2, (16,)),
    "large": (128, 2, (16, 8)),
}
_MULTIPLIERS = (1, 2, 4, 4, 4, 4)


def _num_levels(image_size):
    """Levels down to 4x4 (images up to 32) or 8x8, at most 6."""
    lowest = 4 if image_size <= 32 else 8
    levels = 1
    while (
        levels < len(_MULTIPLIERS)
        and image_size % 2**levels == 0
        and image_size // 2**levels >= lowest
    ):
        levels += 1
    return levels


def unet_settings(model_size, image_size):
    """`UNet` arguments of a named size for square images of `image_size`.

    Args:
        model_size: `"tiny"`, `"small"`, `"base"` or `"large"`.
        image_size: int, the side of the (square) images.

    Returns:
        dict with `widths`, `num_res_blocks` and `attention_levels` (lists).

    Example:

    ```python
    unet_settings("small", 64)
    # {'widths': [32, 64, 128, 128], 'num_res_blocks': 1,
    #  'attention_levels': [False, False, True, False]}
    ```
    """
    check_choice("model_size", model_size, MODEL_SIZES)
    base, blocks, attention = _SETTINGS[model_size]
    levels = _num_levels(image_size)
    resolutions = [image_size // 2**level for level in range(levels)]
    return {
        "widths": [base * m for m in _MULTIPLIERS[:levels]],
        "num_res_blocks": blocks,
        "attention_levels": [r in attention for r in resolutions],
    }
