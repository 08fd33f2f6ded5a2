"""diffusers `UNet2DConditionModel` configs <-> a cross-attention `UNet`'s
arguments.

A `keras_diffusion.UNet(cross_attention_dim=D)` is a `UNet2DConditionModel`
of `CrossAttnDownBlock2D` / `CrossAttnUpBlock2D` at its attention levels
(`DownBlock2D` / `UpBlock2D` elsewhere), `UNetMidBlock2DCrossAttn`,
`cross_attention_dim=D`, one `BasicTransformerBlock` a block with 1x1
convolutional projections, and its pooled-context projection as
`class_embed_type="projection"` with `projection_class_embeddings_input_dim=D`:
diffusers' caller passes the context's mean over its tokens as
`class_labels`. diffusers' `attention_head_dim` of this class is the number
of heads (its own comment calls the name a mistake), which split each
block's width evenly, as the `UNet`'s transformer blocks do.
"""

from keras_diffusion.interop.diffusers_config import (
    block_types,
    checked_size,
    unknown_blocks,
)
from keras_diffusion.interop.diffusers_scheduler import DIFFUSERS_VERSION
from keras_diffusion.models.unet_args import ARGUMENTS, check_unet_args

CLASS_NAME = "UNet2DConditionModel"
_DOWN_BLOCKS = {"DownBlock2D": False, "CrossAttnDownBlock2D": True}
_UP_BLOCKS = {"UpBlock2D": False, "CrossAttnUpBlock2D": True}
_MID_BLOCKS = ("UNetMidBlock2DCrossAttn", None)
# UNet2DConditionModel's defaults of the keys read here.
_DEFAULTS = {
    "sample_size": None,
    "in_channels": 4,
    "out_channels": 4,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "down_block_types": (
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "DownBlock2D",
    ),
    "mid_block_type": "UNetMidBlock2DCrossAttn",
    "up_block_types": (
        "UpBlock2D",
        "CrossAttnUpBlock2D",
        "CrossAttnUpBlock2D",
        "CrossAttnUpBlock2D",
    ),
    "block_out_channels": (320, 640, 1280, 1280),
    "layers_per_block": 2,
    "downsample_padding": 1,
    "dropout": 0.0,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "cross_attention_dim": 1280,
    "attention_head_dim": 8,
    "resnet_time_scale_shift": "default",
    "time_embedding_dim": None,
    "projection_class_embeddings_input_dim": None,
}
# The options the `UNet` has one value of: diffusers' default, or a value
# that computes the same in float32 (`upcast_attention`).
_FIXED = {
    "center_input_sample": (False,),
    "only_cross_attention": (False,),
    "mid_block_scale_factor": (1, 1.0),
    "act_fn": ("silu", "swish"),
    "transformer_layers_per_block": (1,),
    "reverse_transformer_layers_per_block": (None,),
    "encoder_hid_dim": (None,),
    "encoder_hid_dim_type": (None,),
    "num_attention_heads": (None,),
    "dual_cross_attention": (False,),
    "use_linear_projection": (False,),
    "addition_embed_type": (None,),
    "num_class_embeds": (None,),
    "resnet_skip_time_act": (False,),
    "resnet_out_scale_factor": (1, 1.0),
    "time_embedding_type": ("positional",),
    "time_embedding_act_fn": (None,),
    "timestep_post_act": (None,),
    "time_cond_proj_dim": (None,),
    "conv_in_kernel": (3,),
    "conv_out_kernel": (3,),
    "attention_type": ("default",),
    "class_embeddings_concat": (False,),
    "mid_block_only_cross_attention": (None, False),
    "cross_attention_norm": (None,),
}
_ASSUMED = {"center_input_sample": False, "only_cross_attention": False}


def _problems(c, down, up):
    """The options of config `c` the `UNet` cannot express."""
    problems = [
        f"{key}={c.get(key, allowed[0])!r}"
        for key, allowed in _FIXED.items()
        if c.get(key, _ASSUMED.get(key, allowed[0])) not in allowed
    ]
    if c.get("class_embed_type") != "projection":
        problems.append(
            f"class_embed_type={c.get('class_embed_type')!r} (the UNet adds "
            "the pooled context's projection to the timestep embedding)"
        )
    problems += unknown_blocks(down, up, _DOWN_BLOCKS, _UP_BLOCKS)
    if c["mid_block_type"] not in _MID_BLOCKS:
        problems.append(f"mid_block_type={c['mid_block_type']!r}")
    dim = c["cross_attention_dim"]
    if isinstance(dim, bool) or not isinstance(dim, int):
        problems.append(f"cross_attention_dim={dim!r} (one width for every block)")
    elif c["projection_class_embeddings_input_dim"] != dim:
        problems.append(
            "projection_class_embeddings_input_dim="
            f"{c['projection_class_embeddings_input_dim']!r} (the pooled context "
            f"is {dim} wide)"
        )
    if not isinstance(c["layers_per_block"], int):
        problems.append(f"layers_per_block={c['layers_per_block']!r}")
    if c["out_channels"] != c["in_channels"]:
        problems.append(
            f"out_channels={c['out_channels']} != in_channels={c['in_channels']}"
        )
    if len(down) != len(c["block_out_channels"]) or len(up) != len(down):
        problems.append("block type and block_out_channels counts differ")
    return problems


def _num_heads(heads, attended, problems):
    """The `UNet`'s one `num_heads` of diffusers' heads (an int, or one a
    block of which the attending blocks' must agree)."""
    if isinstance(heads, int) and not isinstance(heads, bool):
        return heads
    if not isinstance(heads, (list, tuple)) or len(heads) != len(attended):
        problems.append(f"attention_head_dim={heads!r}")
        return 1
    used = {h for h, a in zip(heads, attended, strict=True) if a}
    if len(used) > 1:
        problems.append(
            f"attention_head_dim={list(heads)} (heads that differ by block; "
            "the UNet has one number of heads)"
        )
    return used.pop() if used else 1


def unet_kwargs(config, source):
    """`UNet` arguments of a diffusers `UNet2DConditionModel` config.

    Raises:
        ValueError: listing every option the `UNet` cannot express.
    """
    c = {**_DEFAULTS, **config}
    down, up = list(c["down_block_types"]), list(c["up_block_types"])
    problems = _problems(c, down, up)
    mid_block = c["mid_block_type"] is not None
    attended = [_DOWN_BLOCKS.get(b, False) for b in down]
    up_attended = [_UP_BLOCKS.get(b, False) for b in reversed(up)]
    either = [a or u for a, u in zip(attended, up_attended, strict=False)]
    if either:
        either[-1] = either[-1] or mid_block
    num_heads = _num_heads(c["attention_head_dim"], either, problems)
    height, width = checked_size(source, c, problems)
    return {
        "image_shape": (height, width, c["in_channels"]),
        "widths": tuple(c["block_out_channels"]),
        "num_res_blocks": c["layers_per_block"],
        "attention_levels": tuple(attended),
        "up_attention_levels": tuple(up_attended),
        "mid_block": mid_block,
        "mid_attention": mid_block,
        "cross_attention_dim": c["cross_attention_dim"],
        "embedding_dim": c["time_embedding_dim"],
        "num_heads": num_heads,
        "groups": c["norm_num_groups"],
        "norm_eps": c["norm_eps"],
        "dropout": c["dropout"],
        "flip_sin_to_cos": bool(c["flip_sin_to_cos"]),
        "freq_shift": c["freq_shift"],
        "downsample_padding": c["downsample_padding"],
        "resnet_time_scale_shift": c["resnet_time_scale_shift"],
    }


def unet_config(unet):
    """The diffusers `UNet2DConditionModel` config of a cross-attention
    `keras_diffusion.UNet`.

    Raises:
        ValueError: in one line, what does not map.
    """
    if unet.mid_block and not unet.mid_attention:
        raise ValueError(
            "diffusers' UNet2DConditionModel cannot express a middle block "
            "without attention (its UNetMidBlock2D there holds one residual "
            "block, this UNet's two): build it with mid_attention=True or "
            "mid_block=False to export it. Received: mid_attention=False"
        )
    height, width, channels = unet.image_shape
    heads = check_unet_args(**{name: getattr(unet, name) for name in ARGUMENTS}).heads
    dim = unet.cross_attention_dim
    return {
        "_class_name": CLASS_NAME,
        "_diffusers_version": DIFFUSERS_VERSION,
        "sample_size": height if height == width else [height, width],
        "in_channels": channels,
        "out_channels": channels,
        "center_input_sample": False,
        "flip_sin_to_cos": unet.flip_sin_to_cos,
        "freq_shift": unet.freq_shift,
        **block_types(
            unet, "CrossAttnDownBlock2D", _MID_BLOCKS[0], "CrossAttnUpBlock2D"
        ),
        "only_cross_attention": False,
        "block_out_channels": list(unet.widths),
        "layers_per_block": unet.num_res_blocks,
        "downsample_padding": unet.downsample_padding,
        "mid_block_scale_factor": 1,
        "dropout": unet.dropout,
        "act_fn": "silu",
        "norm_num_groups": unet.groups,
        "norm_eps": unet.norm_eps,
        "cross_attention_dim": dim,
        "transformer_layers_per_block": 1,
        # The number of heads, under diffusers' name for it.
        "attention_head_dim": heads[0] if len(set(heads)) == 1 else heads,
        "use_linear_projection": False,
        "class_embed_type": "projection",
        "projection_class_embeddings_input_dim": dim,
        "resnet_time_scale_shift": unet.resnet_time_scale_shift,
        "time_embedding_type": "positional",
        # diffusers' None is the UNet's default, 4 * widths[0].
        "time_embedding_dim": None
        if unet.embedding_dim == 4 * unet.widths[0]
        else unet.embedding_dim,
    }
