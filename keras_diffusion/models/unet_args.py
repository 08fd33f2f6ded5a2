"""`UNet`'s arguments: checked in one place, normalised, and what follows.

The checks run in a fixed order, all before a layer is built, so a bad
argument raises naming itself and nothing has been created.
"""

import typing

from keras_diffusion.layers.residual_block import TIME_SCALE_SHIFTS, check_remat
from keras_diffusion.utils.checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
)


class UNetArgs(typing.NamedTuple):
    """`UNet`'s arguments, checked and normalised, and the derived values."""

    image_shape: tuple
    widths: tuple
    num_res_blocks: int
    attention_levels: tuple
    num_classes: int | None
    embedding_dim: int
    num_heads: int
    groups: int
    dropout: float
    up_attention_levels: tuple
    mid_attention: bool
    attention_head_dim: int | None
    mid_attention_groups: int | None
    norm_eps: float
    flip_sin_to_cos: bool
    freq_shift: int
    downsample_padding: int
    resnet_time_scale_shift: str
    mid_block: bool
    null_class: bool
    remat: bool
    cross_attention_dim: int | None
    time_inputs: int
    # Derived: the attention heads of each level, and the GroupNorm groups of
    # the middle attention (0 drops that GroupNorm).
    heads: list
    mid_groups: int


def _as_tuple(name, value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"Argument `{name}` must be a tuple of ints. Received: {name}={value!r}"
        )
    return tuple(value)


def _levels(name, value, default):
    if value is None:
        return default
    value = tuple(bool(a) for a in _as_tuple(name, value))
    if len(value) != len(default):
        raise ValueError(
            f"Argument `{name}` must have one entry per level ({len(default)}). "
            f"Received: {name}={value}"
        )
    return value


def _heads(widths, num_heads, attention_head_dim, attended):
    """Attention heads per level; `attended` marks the levels that attend.

    With `attention_head_dim`, diffusers' rule: `width // attention_head_dim`
    heads of `attention_head_dim` channels, which may cover fewer channels
    than the width.
    """
    if attention_head_dim is None:
        return [num_heads] * len(widths)
    attention_head_dim = check_int("attention_head_dim", attention_head_dim, 1)
    if num_heads != 1:
        raise ValueError(
            "Pass `num_heads` or `attention_head_dim`, not both. Received: "
            f"num_heads={num_heads}, attention_head_dim={attention_head_dim}"
        )
    for width, attends in zip(widths, attended, strict=True):
        if attends and width < attention_head_dim:
            raise ValueError(
                "Every width with attention must be at least "
                f"`attention_head_dim` (one head). Received: widths={widths}, "
                f"attention_head_dim={attention_head_dim}"
            )
    return [max(1, width // attention_head_dim) for width in widths]


def _check_shape(image_shape, widths):
    """`image_shape` (positive ints) and `widths` (not empty) as tuples."""
    image_shape = _as_tuple("image_shape", image_shape)
    widths = _as_tuple("widths", widths)
    if len(image_shape) != 3 or not all(
        isinstance(d, int) and d > 0 for d in image_shape
    ):
        raise ValueError(
            "Argument `image_shape` must be (height, width, channels) of "
            f"positive ints. Received: image_shape={image_shape}"
        )
    if not widths:
        raise ValueError(f"Argument `widths` must not be empty. Received: {widths}")
    return image_shape, widths


def _check_widths(widths, groups):
    """`widths` as positive ints, each divisible by `groups`."""
    widths = tuple(check_int("widths", width, 1) for width in widths)
    for width in widths:
        if width % groups:
            raise ValueError(
                "Every entry of `widths` must be divisible by `groups`. "
                f"Received: widths={widths}, groups={groups}"
            )
    return widths


def _check_attention_levels(attention_levels, widths):
    """One bool a level; `None` is no attention."""
    if attention_levels is not None:
        attention_levels = _as_tuple("attention_levels", attention_levels)
    attention_levels = tuple(
        bool(a) for a in (attention_levels or (False,) * len(widths))
    )
    if len(attention_levels) != len(widths):
        raise ValueError(
            "Argument `attention_levels` must have one entry per level "
            f"({len(widths)}). Received: attention_levels={attention_levels}"
        )
    return attention_levels


def _check_downsampling(image_shape, widths):
    """Every level but the last halves the image: it must divide evenly."""
    factor = 2 ** (len(widths) - 1)
    if image_shape[0] % factor or image_shape[1] % factor:
        raise ValueError(
            f"Image height and width must be divisible by {factor} (2 ** "
            f"(len(widths) - 1), for {len(widths)} levels). Received: "
            f"image_shape={image_shape}"
        )


def _check_mid_attention_groups(mid_attention_groups, widths):
    mid_attention_groups = check_int("mid_attention_groups", mid_attention_groups, 0)
    if mid_attention_groups and widths[-1] % mid_attention_groups:
        raise ValueError(
            "The last entry of `widths` must be divisible by "
            f"`mid_attention_groups`. Received: widths={widths}, "
            f"mid_attention_groups={mid_attention_groups}"
        )
    return mid_attention_groups


def _check_downsample_padding(downsample_padding):
    if isinstance(downsample_padding, bool) or downsample_padding not in (0, 1):
        raise ValueError(
            "Argument `downsample_padding` must be 0 or 1. "
            f"Received: downsample_padding={downsample_padding!r}"
        )


def _check_cross_attention(cross_attention_dim, num_classes, mid_attention_groups):
    """`cross_attention_dim` (`None` or a positive int), or raises when it is
    combined with an argument it cannot go with."""
    if cross_attention_dim is None:
        return None
    cross_attention_dim = check_int("cross_attention_dim", cross_attention_dim, 1)
    if num_classes is not None:
        raise ValueError(
            "A U-Net is conditioned on class labels or on a context, not both: "
            "pass `num_classes` or `cross_attention_dim`. Received: "
            f"num_classes={num_classes}, cross_attention_dim={cross_attention_dim}"
        )
    if mid_attention_groups is not None:
        raise ValueError(
            "Argument `mid_attention_groups` applies to the self-attention "
            "middle block; with `cross_attention_dim` the middle block is a "
            "transformer block normalised with `groups`. Received: "
            f"mid_attention_groups={mid_attention_groups}, "
            f"cross_attention_dim={cross_attention_dim}"
        )
    return cross_attention_dim


def _check_cross_heads(widths, heads, attended, cross_attention_dim):
    """A transformer block's heads split its width: at least one channel a
    head."""
    if cross_attention_dim is None:
        return
    for width, count, attends in zip(widths, heads, attended, strict=True):
        if attends and width < count:
            raise ValueError(
                "With `cross_attention_dim`, every width with attention must "
                "be at least `num_heads` (a transformer block's heads split "
                f"its width). Received: widths={widths}, num_heads={count}"
            )


def _check_mid_attention(
    mid_attention, attention_levels, cross_attention_dim, mid_block
):
    """`mid_attention`, where `None` the last level's attention (or, with
    cross-attention, as `UNetMidBlock2DCrossAttn`, on); it needs the middle
    block."""
    if mid_attention is None:
        mid_attention = (
            attention_levels[-1] or bool(cross_attention_dim)
        ) and mid_block
    mid_attention = check_bool("mid_attention", mid_attention)
    if mid_attention and not mid_block:
        raise ValueError(
            "Argument `mid_attention` needs the middle block. Received: "
            "mid_attention=True, mid_block=False"
        )
    return mid_attention


def check_unet_args(
    image_shape,
    widths,
    num_res_blocks,
    attention_levels,
    num_classes,
    embedding_dim,
    num_heads,
    groups,
    dropout,
    up_attention_levels,
    mid_attention,
    attention_head_dim,
    mid_attention_groups,
    norm_eps,
    flip_sin_to_cos,
    freq_shift,
    downsample_padding,
    resnet_time_scale_shift,
    mid_block,
    null_class,
    remat=False,
    cross_attention_dim=None,
    time_inputs=1,
):
    """Checks `UNet`'s arguments (as `UNet` documents them); returns `UNetArgs`.

    `flip_sin_to_cos`, `freq_shift` and `attention_head_dim` are returned as
    given (`TimestepEmbedding` and `get_config` take them so).
    """
    image_shape, widths = _check_shape(image_shape, widths)
    groups = check_int("groups", groups, 1)
    num_heads = check_int("num_heads", num_heads, 1)
    if embedding_dim is not None:
        embedding_dim = check_int("embedding_dim", embedding_dim, 1)
    dropout = check_float("dropout", dropout, 0.0, less_than=1.0)
    widths = _check_widths(widths, groups)
    num_res_blocks = check_int("num_res_blocks", num_res_blocks, 1)
    attention_levels = _check_attention_levels(attention_levels, widths)
    _check_downsampling(image_shape, widths)
    if num_classes is not None:
        num_classes = check_int("num_classes", num_classes, 1)
    up_attention_levels = _levels(
        "up_attention_levels", up_attention_levels, attention_levels
    )
    mid_block = check_bool("mid_block", mid_block)
    null_class = check_bool("null_class", null_class)
    remat = check_remat(remat, dropout)
    cross_attention_dim = _check_cross_attention(
        cross_attention_dim, num_classes, mid_attention_groups
    )
    mid_attention = _check_mid_attention(
        mid_attention, attention_levels, cross_attention_dim, mid_block
    )
    attended = [
        a or u for a, u in zip(attention_levels, up_attention_levels, strict=True)
    ]
    attended[-1] = attended[-1] or mid_attention
    heads = _heads(widths, num_heads, attention_head_dim, attended)
    _check_cross_heads(widths, heads, attended, cross_attention_dim)
    if mid_attention_groups is not None:
        mid_attention_groups = _check_mid_attention_groups(mid_attention_groups, widths)
    norm_eps = check_float("norm_eps", norm_eps, greater_than=0.0)
    time_inputs = check_int("time_inputs", time_inputs, 1)
    check_bool("flip_sin_to_cos", flip_sin_to_cos)
    _check_downsample_padding(downsample_padding)
    check_choice("resnet_time_scale_shift", resnet_time_scale_shift, TIME_SCALE_SHIFTS)
    return UNetArgs(
        image_shape=image_shape,
        widths=widths,
        num_res_blocks=num_res_blocks,
        attention_levels=attention_levels,
        num_classes=num_classes,
        embedding_dim=embedding_dim or 4 * widths[0],
        num_heads=num_heads,
        groups=groups,
        dropout=dropout,
        up_attention_levels=up_attention_levels,
        mid_attention=mid_attention,
        attention_head_dim=attention_head_dim,
        mid_attention_groups=mid_attention_groups,
        norm_eps=norm_eps,
        flip_sin_to_cos=flip_sin_to_cos,
        freq_shift=freq_shift,
        downsample_padding=downsample_padding,
        resnet_time_scale_shift=resnet_time_scale_shift,
        mid_block=mid_block,
        null_class=null_class,
        remat=remat,
        cross_attention_dim=cross_attention_dim,
        time_inputs=time_inputs,
        heads=heads,
        mid_groups=groups if mid_attention_groups is None else mid_attention_groups,
    )


# `UNet`'s own arguments: each stored under its name and in `get_config`.
ARGUMENTS = UNetArgs._fields[: UNetArgs._fields.index("heads")]
