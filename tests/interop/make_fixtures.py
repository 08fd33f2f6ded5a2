"""Writes the diffusers fixture folders of tests/interop/fixtures/.

Each fixture is a tiny random `UNet2DModel` (a few thousand parameters),
saved by diffusers as a pipeline folder or a bare model folder, with the
outputs diffusers computes for it in `reference.npz` (NHWC, as ours). The
default test suite compares against those without torch. Run it again, with
torch and diffusers installed (the `peer` extra), after changing a config:

    python tests/interop/make_fixtures.py [NAME ...]
    python tests/interop/make_fixtures.py --suite DIR   # every suite config

`SUITE_CONFIGS` are the `UNet2DModel` configs of diffusers' own test suite
(tests/models/unets/test_models_unet_2d.py and its `UNetTesterMixin`).
Only the smallest is committed, as `pipeline_suite_tester` (at 8x8 pixels
and in fp16, 33 kB); suite_test.py builds every one of them live.
"""

import json
import os
import shutil
import sys

import diffusers
import numpy as np
import torch
from diffusers import DDPMPipeline, UNet2DModel
from safetensors.torch import load_file, save_file

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
WEIGHTS = "diffusion_pytorch_model.safetensors"
LEGACY_NAMES = {
    "to_q": "query",
    "to_k": "key",
    "to_v": "value",
    "to_out.0": "proj_attn",
}

# UNet2DTesterConfig.get_init_dict, the suite's default model.
SUITE_TESTER = {
    "block_out_channels": (4, 8),
    "norm_num_groups": 2,
    "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
    "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
    "attention_head_dim": 3,
    "out_channels": 3,
    "in_channels": 3,
    "layers_per_block": 2,
    "sample_size": 32,
}
# name: the config of a test of the suite.
SUITE_CONFIGS = {
    # 8 // 3 = 2 heads of 3 channels: queries, keys and values of 6.
    "tester": SUITE_TESTER,
    "tester_head_dim_4": {**SUITE_TESTER, "attention_head_dim": 4},
    # TestUNet2D.test_mid_block_attn_groups
    "mid_block_attn_groups": {
        **SUITE_TESTER,
        "add_attention": True,
        "attn_norm_num_groups": 4,
    },
    # TestUNet2D.test_mid_block_none
    "mid_block_none": {**SUITE_TESTER, "mid_block_type": None},
    # UNetTesterMixin.test_forward_with_norm_groups: 10 heads of 3 of 32.
    "forward_with_norm_groups": {
        **SUITE_TESTER,
        "norm_num_groups": 16,
        "block_out_channels": (16, 32),
    },
    # UNet2DLDMTesterConfig
    "ldm": {
        "sample_size": 32,
        "in_channels": 4,
        "out_channels": 4,
        "layers_per_block": 2,
        "block_out_channels": (32, 64),
        "attention_head_dim": 32,
        "down_block_types": ("DownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "UpBlock2D"),
    },
}
# NCSNppTesterConfig: Fourier time embedding, Skip blocks, a mid-block scale;
# keras_diffusion.UNet's blocks cannot express it.
SUITE_REFUSED = {
    "ncsnpp": {
        "block_out_channels": [32, 64, 64, 64],
        "in_channels": 3,
        "layers_per_block": 1,
        "out_channels": 3,
        "time_embedding_type": "fourier",
        "norm_eps": 1e-6,
        "mid_block_scale_factor": 2.0**0.5,
        "norm_num_groups": None,
        "down_block_types": [
            "SkipDownBlock2D",
            "AttnSkipDownBlock2D",
            "SkipDownBlock2D",
            "SkipDownBlock2D",
        ],
        "up_block_types": [
            "SkipUpBlock2D",
            "SkipUpBlock2D",
            "AttnSkipUpBlock2D",
            "SkipUpBlock2D",
        ],
    },
}

BASE = {
    "sample_size": 8,
    "in_channels": 1,
    "out_channels": 1,
    "block_out_channels": (2, 4),
    "layers_per_block": 1,
    "norm_num_groups": 2,
}
# name: (UNet2DModel options, scheduler options or None for a bare model
# folder, weight storage)
CONFIGS = {
    # keras_diffusion.UNet's own layout, class-conditional; clipped DDPM.
    "pipeline_unet_layout": (
        {
            "flip_sin_to_cos": False,
            "freq_shift": 0,
            "downsample_padding": 0,
            "attention_head_dim": None,
            "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
            "num_class_embeds": 3,
        },
        {"num_train_timesteps": 50, "clip_sample": True},
        "float32",
    ),
    # diffusers' own defaults (flipped, shifted, symmetric padding), heads
    # of two channels, attention on the way down only, dropout, norm_eps.
    "unet_diffusers_defaults": (
        {
            "block_out_channels": (4, 4),
            "freq_shift": 1,
            "attention_head_dim": 2,
            "norm_eps": 1e-6,
            "dropout": 0.1,
            "down_block_types": ("AttnDownBlock2D", "DownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
        },
        None,
        "float32",
    ),
    # Scale-shift conditioning: the middle attention has no GroupNorm;
    # cosine betas, zero terminal SNR, v-prediction.
    "pipeline_scale_shift": (
        {
            "resnet_time_scale_shift": "scale_shift",
            "attention_head_dim": 2,
            "layers_per_block": 2,
            "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
        },
        {
            "num_train_timesteps": 40,
            "beta_schedule": "squaredcos_cap_v2",
            "prediction_type": "v_prediction",
            "rescale_betas_zero_snr": True,
            "clip_sample": False,
        },
        "float32",
    ),
    # Three levels, scale-shift with the middle attention's own groups, a
    # wider time embedding; trained betas, x0-prediction.
    "pipeline_attn_groups_trained_betas": (
        {
            "block_out_channels": (2, 4, 4),
            "resnet_time_scale_shift": "scale_shift",
            "attn_norm_num_groups": 1,
            "attention_head_dim": 4,
            "time_embedding_dim": 12,
            "down_block_types": ("DownBlock2D", "DownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D", "UpBlock2D"),
        },
        {
            "num_train_timesteps": 10,
            "trained_betas": list(np.linspace(0.01, 0.3, 10)),
            "prediction_type": "sample",
        },
        "float32",
    ),
    # A checkpoint from before diffusers renamed the attention weights, in
    # fp16; scaled-linear betas.
    "pipeline_legacy_names_fp16": (
        {
            "attention_head_dim": None,
            "down_block_types": ("AttnDownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "AttnUpBlock2D"),
        },
        {"num_train_timesteps": 30, "beta_schedule": "scaled_linear"},
        "float16",
    ),
    # bf16 weights, no middle attention despite an attention level, the
    # "UNetRes" block-name prefix; sigmoid betas.
    "pipeline_no_mid_attention_bf16": (
        {
            "add_attention": False,
            "attention_head_dim": 2,
            "down_block_types": ("UNetResDownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UNetResUpBlock2D"),
            "num_class_embeds": 2,
        },
        {"num_train_timesteps": 20, "beta_schedule": "sigmoid", "beta_end": 0.05},
        "bfloat16",
    ),
    # The suite's default model (heads of 3 channels over widths 4 and 8) at
    # 8x8; a DDIMScheduler with "trailing" spacing and steps_offset=1.
    "pipeline_suite_tester": (
        {**SUITE_TESTER, "sample_size": 8},
        {
            "_class_name": "DDIMScheduler",
            "timestep_spacing": "trailing",
            "steps_offset": 1,
        },
        "float16",
    ),
}


def random_unet(options, seed, std=0.4, base=BASE):
    """A `UNet2DModel` of `options` (over `base`) with random weights."""
    torch.manual_seed(seed)
    unet = UNet2DModel(**{**base, **options}).eval()
    with torch.no_grad():
        # Random values everywhere (diffusers starts some at zero), so that
        # a weight ported into the wrong place shows in the outputs.
        for parameter in unet.parameters():
            parameter.normal_(0.0, std)
    return unet


def scheduler_of(options):
    """A diffusers scheduler of `options`; `_class_name` picks the class."""
    options = dict(options)
    class_name = options.pop("_class_name", "DDPMScheduler")
    return getattr(diffusers, class_name)(**options)


def _store(unet_folder, dtype, legacy):
    path = os.path.join(unet_folder, WEIGHTS)
    tensors = load_file(path)
    renamed = {}
    for key, value in tensors.items():
        if legacy:
            for new, old in LEGACY_NAMES.items():
                key = key.replace(f".{new}.", f".{old}.")
        renamed[key] = value.to(getattr(torch, dtype)).contiguous()
    save_file(renamed, path, metadata={"format": "pt"})


def make(name, options, scheduler_options, dtype, seed, root=FIXTURES, base=BASE):
    folder = os.path.join(root, name)
    shutil.rmtree(folder, ignore_errors=True)
    unet = random_unet(options, seed, base=base)
    # The reference runs on the weights as stored (rounded to fp16/bf16).
    with torch.no_grad():
        for parameter in unet.parameters():
            parameter.copy_(parameter.to(getattr(torch, dtype)).float())
    if scheduler_options is None:
        unet.save_pretrained(folder)
        unet_folder = folder
        scheduler = scheduler_of({})
    else:
        scheduler = scheduler_of(scheduler_options)
        DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder)
        unet_folder = os.path.join(folder, "unet")
    _store(unet_folder, dtype, legacy="legacy" in name)

    rng = np.random.default_rng(seed)
    channels = unet.config.in_channels
    size = unet.config.sample_size
    x = rng.normal(size=(3, channels, size, size)).astype(np.float32)
    T = scheduler.config.num_train_timesteps
    t = np.array([0.0, T / 3 + 0.5, T - 1.0], np.float32)
    classes = unet.config.num_class_embeds
    labels = None if classes is None else np.arange(3, dtype=np.int64) % classes
    with torch.no_grad():
        out = unet(
            torch.from_numpy(x),
            torch.from_numpy(t),
            None if labels is None else torch.from_numpy(labels),
        ).sample.numpy()
    arrays = {
        "x": x.transpose(0, 2, 3, 1),
        "t": t,
        "output": out.transpose(0, 2, 3, 1),
        "betas": scheduler.betas.numpy().astype(np.float32),
        "num_params": np.int64(sum(p.numel() for p in unet.parameters())),
    }
    if labels is not None:
        arrays["labels"] = labels.astype(np.int32)
    np.savez_compressed(os.path.join(folder, "reference.npz"), **arrays)
    with open(os.path.join(folder, "reference.json"), "w") as file:
        sched = dict(scheduler.config)
        json.dump(
            {
                "prediction_type": sched["prediction_type"],
                "clip_sample": sched["clip_sample"],
            },
            file,
            indent=2,
        )


def write_suite(root):
    """Writes every `SUITE_CONFIGS` model, as a pipeline folder with its
    reference outputs, under `root` (too large to commit: 0.2 to 3.7 MB)."""
    for index, (name, options) in enumerate(sorted(SUITE_CONFIGS.items())):
        make(name, options, {}, "float32", seed=index, root=root, base={})
        print("wrote", os.path.join(root, name))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--suite"]:
        if len(sys.argv) != 3:
            sys.exit("Usage: make_fixtures.py --suite DIR")
        write_suite(sys.argv[2])
        sys.exit(0)
    os.makedirs(FIXTURES, exist_ok=True)
    chosen = sys.argv[1:] or list(CONFIGS)
    unknown = sorted(set(chosen) - set(CONFIGS))
    if unknown:
        sys.exit(f"No fixture named {unknown}; the fixtures: {sorted(CONFIGS)}")
    for index, (name, (options, scheduler_options, dtype)) in enumerate(
        CONFIGS.items()
    ):
        if name in chosen:
            make(name, options, scheduler_options, dtype, seed=index)
            print("wrote", name)
