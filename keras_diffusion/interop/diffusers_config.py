"""diffusers configs <-> `UNet` arguments, `NoiseSchedule` and sampler options."""

import numpy as np

DIFFUSERS_VERSION = "0.30.0"
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
# DDPMScheduler's defaults: what a bare U-Net folder is sampled with.
SCHEDULER_DEFAULTS = {
    "num_train_timesteps": 1000,
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "trained_betas": None,
    "prediction_type": "epsilon",
    "clip_sample": True,
    "clip_sample_range": 1.0,
    "rescale_betas_zero_snr": False,
}


def _strip_prefix(name):
    # diffusers' get_down_block / get_up_block accept a "UNetRes" prefix.
    return name[7:] if name.startswith("UNetRes") else name


def unet_kwargs(config, source):
    """`UNet` arguments of a diffusers `UNet2DModel` config.

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
        ("downsample_type", ("conv",)),
        ("upsample_type", ("conv",)),
        ("mid_block_type", ("UNetMidBlock2D",)),
        ("center_input_sample", (False,)),
        ("mid_block_scale_factor", (1,)),
        ("resnet_time_scale_shift", ("default", "scale_shift")),
    ):
        if c[key] not in allowed:
            problems.append(f"{key}={c[key]!r}")
    if c["act_fn"] not in _ACTIVATIONS:
        problems.append(f"act_fn={c['act_fn']!r}")
    for key, blocks, known in (
        ("down_block_types", down, _DOWN_BLOCKS),
        ("up_block_types", up, _UP_BLOCKS),
    ):
        unknown = [b for b in blocks if b not in known]
        if unknown:
            problems.append(f"{key} {unknown}")
    if c["out_channels"] != c["in_channels"]:
        problems.append(
            f"out_channels={c['out_channels']} != in_channels={c['in_channels']}"
        )
    if c["num_class_embeds"] is not None and c["num_class_embeds"] < 2:
        problems.append(f"num_class_embeds={c['num_class_embeds']!r}")
    if len(down) != len(c["block_out_channels"]) or len(up) != len(down):
        problems.append("block type and block_out_channels counts differ")
    if problems:
        raise ValueError(
            f"{source} uses options keras_diffusion.UNet does not support: "
            + ", ".join(problems)
        )
    size = c["sample_size"]
    if size is None:
        raise ValueError(f"{source} has no sample_size, so no image size")
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    num_classes = c["num_class_embeds"]
    shift = c["resnet_time_scale_shift"]
    attn_groups = c["attn_norm_num_groups"]
    if attn_groups is None:
        # UNetMidBlock2D's rule: no GroupNorm in its attention with scale-shift.
        attn_groups = c["norm_num_groups"] if shift == "default" else 0
    return {
        "image_shape": (height, width, c["in_channels"]),
        "widths": tuple(c["block_out_channels"]),
        "num_res_blocks": c["layers_per_block"],
        "attention_levels": tuple(_DOWN_BLOCKS[b] for b in down),
        "up_attention_levels": tuple(_UP_BLOCKS[b] for b in reversed(up)),
        "mid_attention": bool(c["add_attention"]),
        "num_classes": None if num_classes is None else num_classes - 1,
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
    widths = [
        width
        for level, width in enumerate(unet.widths)
        if unet.attention_levels[level] or unet.up_attention_levels[level]
    ]
    if unet.mid_attention:
        widths.append(unet.widths[-1])
    heads = [_heads(unet, width) for width in widths]
    if all(h == 1 for h in heads):
        return None
    sizes = {width // h for width, h in zip(widths, heads, strict=True)}
    if len(sizes) > 1:
        raise ValueError(
            "diffusers' UNet2DModel has one attention head size; this UNet's "
            f"differ per level ({sorted(sizes)}, from num_heads="
            f"{unet.num_heads} over widths={unet.widths}). Build it with "
            "`attention_head_dim` to export it."
        )
    return sizes.pop()


def _heads(unet, width):
    if unet.attention_head_dim is not None:
        return width // unet.attention_head_dim
    return unet.num_heads


def unet_config(unet):
    """The diffusers `UNet2DModel` config of a `keras_diffusion.UNet`."""
    shift = unet.resnet_time_scale_shift
    mid_groups = unet.mid_attention_groups
    if mid_groups is None:
        mid_groups = unet.groups
    if mid_groups == 0 and shift == "default" and unet.mid_attention:
        raise ValueError(
            "diffusers cannot express a middle attention without GroupNorm "
            "(mid_attention_groups=0) with resnet_time_scale_shift='default'"
        )
    height, width, channels = unet.image_shape
    levels = range(len(unet.widths))
    return {
        "_class_name": "UNet2DModel",
        "_diffusers_version": DIFFUSERS_VERSION,
        "sample_size": height if height == width else [height, width],
        "in_channels": channels,
        "out_channels": channels,
        "center_input_sample": False,
        "time_embedding_type": "positional",
        "time_embedding_dim": unet.embedding_dim,
        "freq_shift": unet.freq_shift,
        "flip_sin_to_cos": unet.flip_sin_to_cos,
        "down_block_types": [
            "AttnDownBlock2D" if unet.attention_levels[i] else "DownBlock2D"
            for i in levels
        ],
        "mid_block_type": "UNetMidBlock2D",
        "up_block_types": [
            "AttnUpBlock2D" if unet.up_attention_levels[i] else "UpBlock2D"
            for i in reversed(levels)
        ],
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
        "num_class_embeds": None if unet.num_classes is None else unet.num_classes + 1,
    }


def schedule_kwargs(config, source):
    """`NoiseSchedule` arguments, prediction type and clip settings of a
    diffusers scheduler config (DDPMScheduler's defaults fill the gaps)."""
    c = {**SCHEDULER_DEFAULTS, **config}
    schedule = c["beta_schedule"]
    if schedule == "squaredcos_cap_v2":
        schedule = "cosine"
    trained = c["trained_betas"]
    if trained is not None:
        trained = [float(b) for b in np.asarray(trained, dtype=np.float64)]
    if c.get("thresholding"):
        raise ValueError(
            f"{source} uses dynamic thresholding (thresholding=True), which "
            "keras_diffusion's samplers do not implement"
        )
    return (
        {
            "num_train_timesteps": int(c["num_train_timesteps"]),
            "beta_schedule": schedule,
            "beta_start": float(c["beta_start"]),
            "beta_end": float(c["beta_end"]),
            "rescale_zero_terminal_snr": bool(c["rescale_betas_zero_snr"]),
            "trained_betas": trained,
        },
        c["prediction_type"],
        {
            "clip_sample": bool(c["clip_sample"]),
            "clip_sample_range": float(c["clip_sample_range"]),
        },
    )


def scheduler_config(schedule, prediction_type, clip_sample, clip_sample_range):
    """A diffusers `DDPMScheduler` config for a `NoiseSchedule`."""
    beta_schedule = schedule.beta_schedule
    if beta_schedule == "cosine":
        beta_schedule = "squaredcos_cap_v2"
    return {
        "_class_name": "DDPMScheduler",
        "_diffusers_version": DIFFUSERS_VERSION,
        "num_train_timesteps": schedule.num_train_timesteps,
        "beta_start": schedule.beta_start,
        "beta_end": schedule.beta_end,
        "beta_schedule": beta_schedule,
        "trained_betas": schedule.trained_betas,
        "variance_type": "fixed_small",
        "clip_sample": bool(clip_sample),
        "clip_sample_range": float(clip_sample_range),
        "prediction_type": prediction_type,
        "thresholding": False,
        "timestep_spacing": "leading",
        "steps_offset": 0,
        "rescale_betas_zero_snr": schedule.rescale_zero_terminal_snr,
    }
