"""diffusers `UNet2DModel` configs <-> `keras_diffusion.UNet` arguments.

Class labels: diffusers' `num_class_embeds=N` embeds N classes, all of them
conditional. A `UNet` built here keeps one more embedding, its null class
for guidance; its export stores `num_classes + 1` embeddings and says so
under the private key `_keras_diffusion` (`{"null_class": true}`), which
diffusers ignores and `unet_kwargs` reads back.
"""

from keras_diffusion.interop.diffusers_scheduler import DIFFUSERS_VERSION, PRIVATE_KEY

_DOWN_BLOCKS = {"DownBlock2D": False, "AttnDownBlock2D": True}
_UP_BLOCKS = {"UpBlock2D": False, "AttnUpBlock2D": True}
_ACTIVATIONS = ("silu", "swish")
# UNet2DModel's defaults, for the keys a config may leave out.
_UNET_DEFAULTS = {
    "sample_size": None,
    "in_channels": 3,
    "out_channels": 3,
    "center_input_sample": False,
    "time_embedding_type": "positional",
    "time_embedding_dim": None,
    "freq_shift": 0,
    "flip_sin_to_cos": True,
    "down_block_types": (
        "DownBlock2D",
        "AttnDownBlock2D",
        "AttnDownBlock2D",
        "AttnDownBlock2D",
    ),
    "mid_block_type": "UNetMidBlock2D",
    "up_block_types": ("AttnUpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    "block_out_channels": (224, 448, 672, 896),
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "downsample_padding": 1,
    "downsample_type": "conv",
    "upsample_type": "conv",
    "dropout": 0.0,
    "act_fn": "silu",
    "attention_head_dim": 8,
    "norm_num_groups": 32,
    "attn_norm_num_groups": None,
    "norm_eps": 1e-5,
    "resnet_time_scale_shift": "default",
    "add_attention": True,
    "class_embed_type": None,
    "num_class_embeds": None,
}


def _strip_prefix(name):
    # diffusers' get_down_block / get_up_block accept a "UNetRes" prefix.
    return name[7:] if name.startswith("UNetRes") else name


def _sampling_types(c, down, up):
    """The options of the down and up samplers that the blocks use.

    `downsample_type` reaches only the `AttnDownBlock2D`s that downsample
    (not the last), `upsample_type` only the upsampling `AttnUpBlock2D`s.
    """
    problems = []
    for key, blocks, block in (
        ("downsample_type", down, "AttnDownBlock2D"),
        ("upsample_type", up, "AttnUpBlock2D"),
    ):
        if c[key] not in (None, "conv") and block in blocks[:-1]:
            problems.append(f"{key}={c[key]!r}")
    return problems


def _class_count(c, null_class, problems):
    """(num_classes, null_class) of `num_class_embeds`; `None` unconditional."""
    embeds = c["num_class_embeds"]
    if embeds is None:
        return None, True
    if null_class is None:
        null_class = bool((c.get(PRIVATE_KEY) or {}).get("null_class", False))
    if isinstance(embeds, bool) or not isinstance(embeds, int) or embeds < 1:
        problems.append(f"num_class_embeds={embeds!r}")
    elif null_class and embeds < 2:
        problems.append(
            f"num_class_embeds={embeds} with a null class (no class beside it)"
        )
    else:
        return embeds - int(null_class), null_class
    return None, null_class


def unet_kwargs(config, source, null_class=None):
    """`UNet` arguments of a diffusers `UNet2DModel` config.

    Args:
        config: dict, the `config.json` of the U-Net.
        source: str, its name, for the messages.
        null_class: optional bool, whether the last class embedding is a
            null class for guidance. Defaults to `None`: only when the config
            says so (`_keras_diffusion.null_class`, written by
            `to_diffusers`); diffusers' own models have none.

    Raises:
        ValueError: listing every option this `UNet` cannot express.
    """
    class_name = config.get("_class_name", "UNet2DModel")
    if class_name != "UNet2DModel":
        raise ValueError(
            f"{source} holds a {class_name}; only UNet2DModel (pixel-space "
            "DDPM U-Nets) can be loaded"
        )
    c = {**_UNET_DEFAULTS, **config}
    down = [_strip_prefix(b) for b in c["down_block_types"]]
    up = [_strip_prefix(b) for b in c["up_block_types"]]
    problems = []
    for key, allowed in (
        ("time_embedding_type", ("positional",)),
        ("class_embed_type", (None,)),
        ("mid_block_type", ("UNetMidBlock2D", None)),
        ("center_input_sample", (False,)),
        ("mid_block_scale_factor", (1,)),
        ("resnet_time_scale_shift", ("default", "scale_shift")),
    ):
        if c[key] not in allowed:
            problems.append(f"{key}={c[key]!r}")
    if c["act_fn"] not in _ACTIVATIONS:
        problems.append(f"act_fn={c['act_fn']!r}")
    problems += unknown_blocks(down, up, _DOWN_BLOCKS, _UP_BLOCKS)
    if c["out_channels"] != c["in_channels"]:
        problems.append(
            f"out_channels={c['out_channels']} != in_channels={c['in_channels']}"
        )
    problems += _sampling_types(c, down, up)
    num_classes, null_class = _class_count(c, null_class, problems)
    if len(down) != len(c["block_out_channels"]) or len(up) != len(down):
        problems.append("block type and block_out_channels counts differ")
    height, width = checked_size(source, c, problems)
    shift = c["resnet_time_scale_shift"]
    mid_block = c["mid_block_type"] is not None
    attn_groups = c["attn_norm_num_groups"]
    if attn_groups is None and shift != "default":
        # UNetMidBlock2D's rule: no GroupNorm in its attention with scale-shift
        # (and, with "default", `None` is norm_num_groups, as in UNet).
        attn_groups = 0
    return {
        "image_shape": (height, width, c["in_channels"]),
        "widths": tuple(c["block_out_channels"]),
        "num_res_blocks": c["layers_per_block"],
        "attention_levels": tuple(_DOWN_BLOCKS[b] for b in down),
        "up_attention_levels": tuple(_UP_BLOCKS[b] for b in reversed(up)),
        "mid_block": mid_block,
        "mid_attention": bool(c["add_attention"]) and mid_block,
        "num_classes": num_classes,
        "null_class": null_class,
        "embedding_dim": c["time_embedding_dim"],
        "attention_head_dim": c["attention_head_dim"],
        "groups": c["norm_num_groups"],
        "mid_attention_groups": attn_groups,
        "norm_eps": c["norm_eps"],
        "dropout": c["dropout"],
        "flip_sin_to_cos": bool(c["flip_sin_to_cos"]),
        "freq_shift": c["freq_shift"],
        "downsample_padding": c["downsample_padding"],
        "resnet_time_scale_shift": shift,
    }


def _attention_head_dim(unet):
    """diffusers' one `attention_head_dim`: `None` is one head everywhere."""
    if unet.attention_head_dim is not None:
        return unet.attention_head_dim
    widths = [
        width
        for level, width in enumerate(unet.widths)
        if unet.attention_levels[level] or unet.up_attention_levels[level]
    ]
    if unet.mid_attention:
        widths.append(unet.widths[-1])
    if unet.num_heads == 1 or not widths:
        return None
    sizes = {width // unet.num_heads for width in widths}
    if len(sizes) > 1:
        raise ValueError(
            "diffusers' UNet2DModel has one attention head size; this UNet's "
            f"differ per level ({sorted(sizes)}, from num_heads="
            f"{unet.num_heads} over widths={unet.widths}). Build it with "
            "`attention_head_dim` to export it."
        )
    return sizes.pop()


def block_types(unet, attention_down, middle, attention_up):
    """diffusers' block types of `unet`'s levels: `attention_down` and
    `attention_up` where a level attends (else plain `DownBlock2D` and
    `UpBlock2D`), and its `middle` block (or `None` without one)."""
    levels = range(len(unet.widths))
    return {
        "down_block_types": [
            attention_down if unet.attention_levels[i] else "DownBlock2D"
            for i in levels
        ],
        "mid_block_type": middle if unet.mid_block else None,
        "up_block_types": [
            attention_up if unet.up_attention_levels[i] else "UpBlock2D"
            for i in reversed(levels)
        ],
    }


def unet_config(unet):
    """The diffusers `UNet2DModel` config of a `keras_diffusion.UNet`."""
    shift = unet.resnet_time_scale_shift
    mid_groups = unet.mid_attention_groups
    if mid_groups is None and shift != "default":
        mid_groups = unet.groups
    if mid_groups == 0 and shift == "default" and unet.mid_attention:
        raise ValueError(
            "diffusers cannot express a middle attention without GroupNorm "
            "(mid_attention_groups=0) with resnet_time_scale_shift='default'"
        )
    height, width, channels = unet.image_shape
    conditional = unet.num_classes is not None
    null_class = conditional and unet.null_class
    config = {
        "_class_name": "UNet2DModel",
        "_diffusers_version": DIFFUSERS_VERSION,
        "sample_size": height if height == width else [height, width],
        "in_channels": channels,
        "out_channels": channels,
        "center_input_sample": False,
        "time_embedding_type": "positional",
        # diffusers' None is the UNet's default, 4 * widths[0].
        "time_embedding_dim": None
        if unet.embedding_dim == 4 * unet.widths[0]
        else unet.embedding_dim,
        "freq_shift": unet.freq_shift,
        "flip_sin_to_cos": unet.flip_sin_to_cos,
        **block_types(unet, "AttnDownBlock2D", "UNetMidBlock2D", "AttnUpBlock2D"),
        "block_out_channels": list(unet.widths),
        "layers_per_block": unet.num_res_blocks,
        "mid_block_scale_factor": 1,
        "downsample_padding": unet.downsample_padding,
        "downsample_type": "conv",
        "upsample_type": "conv",
        "dropout": unet.dropout,
        "act_fn": "silu",
        "attention_head_dim": _attention_head_dim(unet),
        "norm_num_groups": unet.groups,
        "attn_norm_num_groups": mid_groups or None,
        "norm_eps": unet.norm_eps,
        "resnet_time_scale_shift": shift,
        "add_attention": unet.mid_attention,
        "class_embed_type": None,
        "num_class_embeds": unet.num_classes + int(null_class) if conditional else None,
    }
    if null_class:
        config[PRIVATE_KEY] = {"null_class": True}
    return config


def checked_size(source, config, problems):
    """`(height, width)` of a diffusers U-Net's `config`, once the
    `problems` found in it (the options `UNet` cannot express) are refused
    in one line, all of them."""
    if problems:
        raise ValueError(
            f"{source} uses options keras_diffusion.UNet does not support: "
            + ", ".join(problems)
        )
    size = config["sample_size"]
    if size is None:
        raise ValueError(f"{source} has no sample_size, so no image size")
    return (size, size) if isinstance(size, int) else tuple(size)


def unknown_blocks(down, up, down_known, up_known):
    """A problem line for each kind of block (down, up) with types the
    `UNet` lacks: those of `down` not in `down_known`, of `up` not in
    `up_known`."""
    problems = []
    for key, blocks, known in (
        ("down_block_types", down, down_known),
        ("up_block_types", up, up_known),
    ):
        unknown = [b for b in blocks if b not in known]
        if unknown:
            problems.append(f"{key} {unknown}")
    return problems
