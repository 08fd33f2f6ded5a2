"""The PyTorch + diffusers peer: the same U-Net, trained and sampled the diffusers way.

`diffusers_unet` builds a diffusers `UNet2DModel` that is the same network as
a `keras_diffusion.UNet` (the same blocks in the same order, the same
parameter count); `TorchTrainer` trains it as diffusers' training examples
do (`DDPMScheduler.add_noise`, epsilon MSE, `EMAModel`), and `TorchSampler`
samples it with `DDIMPipeline` from the EMA weights.

This module imports torch and diffusers (`pip install ".[peer]"`) and never
TensorFlow: it runs in the torch worker of `benchmarks.peer_jobs`.
"""

import contextlib
import time

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DDIMPipeline, DDIMScheduler, DDPMScheduler, UNet2DModel
from diffusers.training_utils import EMAModel
from torch.utils.data import DataLoader, TensorDataset

# keras_diffusion.NoiseSchedule's names that DDPMScheduler spells otherwise.
BETA_SCHEDULES = {"cosine": "squaredcos_cap_v2"}
# Keras Adam's default epsilon (torch's is 1e-8): the same update rule.
KERAS_ADAM_EPSILON = 1e-7


def _attention_head_dim(config):
    # keras_diffusion fixes the number of heads, diffusers the width of one
    # head: the same only where every attention block has the same width.
    widths, levels = config["widths"], config["attention_levels"]
    num_heads = config.get("num_heads", 1)
    attended = {width for width, attend in zip(widths, levels, strict=True) if attend}
    if num_heads == 1 or not attended:
        return None  # diffusers' default: one head as wide as its block
    if len(attended) > 1:
        raise ValueError(
            "diffusers has one `attention_head_dim` for every block: "
            f"num_heads={num_heads} with attention at widths {sorted(attended)} "
            "has no diffusers equivalent."
        )
    return attended.pop() // num_heads


def diffusers_unet(config):
    """A `UNet2DModel`, the same network as `keras_diffusion.UNet(**config)`.

    Levels map to `DownBlock2D` / `UpBlock2D` (`Attn...` where
    `attention_levels` is set) with `layers_per_block=num_res_blocks`; the mid
    block has attention only when the last level has; the sinusoid is
    keras_diffusion's (sin then cos, frequencies `10000 ** (-i / half)`), so
    `flip_sin_to_cos=False` and `freq_shift=0`; a conditional model has
    `num_classes + 1` class embeddings (the last one the "null" class).

    Args:
        config: dict, a `keras_diffusion.UNet`'s `get_config()`.
    """
    height, width, channels = config["image_shape"]
    if height != width:
        raise ValueError(f"Square images only. Received: {config['image_shape']}")
    widths, levels = tuple(config["widths"]), tuple(config["attention_levels"])
    num_classes = config.get("num_classes")
    return UNet2DModel(
        sample_size=height,
        in_channels=channels,
        out_channels=channels,
        time_embedding_type="positional",
        time_embedding_dim=config.get("embedding_dim") or 4 * widths[0],
        flip_sin_to_cos=False,
        freq_shift=0,
        down_block_types=tuple(
            "AttnDownBlock2D" if attend else "DownBlock2D" for attend in levels
        ),
        up_block_types=tuple(
            "AttnUpBlock2D" if attend else "UpBlock2D" for attend in reversed(levels)
        ),
        block_out_channels=widths,
        layers_per_block=config["num_res_blocks"],
        dropout=config.get("dropout", 0.0),
        attention_head_dim=_attention_head_dim(config),
        norm_num_groups=config["groups"],
        norm_eps=1e-5,
        add_attention=levels[-1],
        num_class_embeds=None if num_classes is None else num_classes + 1,
    )


def check_parameters(model, expected):
    """Raises `ValueError` unless `model` has `expected` parameters."""
    count = sum(p.numel() for p in model.parameters())
    if count != expected:
        raise ValueError(
            f"The diffusers U-Net has {count:,} parameters and the Keras U-Net "
            f"{expected:,}: they are not the same network."
        )
    return count


def ddpm_scheduler(schedule):
    """`DDPMScheduler` of a `keras_diffusion.NoiseSchedule`'s config."""
    name = schedule["beta_schedule"]
    return DDPMScheduler(
        num_train_timesteps=schedule["num_train_timesteps"],
        beta_schedule=BETA_SCHEDULES.get(name, name),
        beta_start=schedule["beta_start"],
        beta_end=schedule["beta_end"],
        rescale_betas_zero_snr=schedule.get("rescale_zero_terminal_snr", False),
    )


def autocast(device, amp):
    """`torch.autocast` in float16 (CUDA) or bfloat16 (CPU) if `amp`."""
    if not amp:
        return contextlib.nullcontext()
    dtype = torch.float16 if device == "cuda" else torch.bfloat16
    return torch.autocast(device, dtype=dtype)


class TorchTrainer:
    """Training the diffusers way; `run(steps)` trains and returns the seconds.

    Per step: a batch from a shuffling `DataLoader`, `torch.randint`
    timesteps, `torch.randn_like` noise, `DDPMScheduler.add_noise`, the MSE
    to the noise, Adam and `EMAModel.step` (whose default decay,
    `min(decay, (1 + n) / (10 + n))`, is keras_diffusion's EMA warm-up).

    Args:
        unet: a `UNet2DModel`, on `device`.
        schedule: dict, a `keras_diffusion.NoiseSchedule`'s config.
        images: float32 NumPy array `(N, H, W, C)` in [-1, 1].
        batch_size: int.
        learning_rate: float, Adam's.
        ema_decay: float, or `None` for no EMA.
        device: `"cpu"` or `"cuda"`.
        amp: bool, autocast (and a `GradScaler` in float16 on CUDA).
    """

    def __init__(
        self, unet, schedule, images, batch_size, learning_rate, ema_decay, device, amp
    ):
        self.unet, self.device, self.amp = unet, device, amp
        self.scheduler = ddpm_scheduler(schedule)
        self.optimizer = torch.optim.Adam(
            unet.parameters(), lr=learning_rate, eps=KERAS_ADAM_EPSILON
        )
        self.ema = EMAModel(unet.parameters(), decay=ema_decay) if ema_decay else None
        self.scaler = torch.amp.GradScaler(device) if amp and device == "cuda" else None
        data = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        self.loader = DataLoader(
            TensorDataset(data),
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            generator=torch.Generator().manual_seed(0),
        )
        self.batches = self._batches()

    def _batches(self):
        while True:
            for (x0,) in self.loader:
                yield x0.to(self.device)

    def step(self):
        x0 = next(self.batches)
        noise = torch.randn_like(x0)
        t = torch.randint(
            0, self.scheduler.config.num_train_timesteps, (len(x0),), device=x0.device
        )
        x_t = self.scheduler.add_noise(x0, noise, t)
        with autocast(self.device, self.amp):
            prediction = self.unet(x_t, t).sample
        loss = F.mse_loss(prediction.float(), noise)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        if self.ema is not None:
            self.ema.step(self.unet.parameters())
        return loss

    def run(self, steps):
        self.unet.train()
        start = time.perf_counter()
        for _ in range(steps):
            loss = self.step()
        loss.item()  # the clock stops once the device has done the work
        return time.perf_counter() - start


class TorchSampler:
    """`DDIMPipeline` (eta 0) on the trainer's U-Net with its EMA weights.

    Args:
        trainer: a `TorchTrainer`.
        num_images: int, images a call.
        num_steps: int, DDIM steps.
    """

    def __init__(self, trainer, num_images, num_steps):
        self.trainer, self.num_images, self.num_steps = trainer, num_images, num_steps
        scheduler = DDIMScheduler.from_config(trainer.scheduler.config)
        self.pipeline = DDIMPipeline(unet=trainer.unet, scheduler=scheduler)
        self.pipeline.set_progress_bar_config(disable=True)

    def run(self, warm_up=False):
        """Samples once (under `torch.no_grad`, as the pipeline does); seconds.

        `warm_up`: two DDIM steps only. Eager PyTorch compiles nothing: what a
        first call pays (oneDNN's primitives for these shapes) two steps pay.
        """
        unet, ema = self.trainer.unet, self.trainer.ema
        unet.eval()
        start = time.perf_counter()
        if ema is not None:
            ema.store(unet.parameters())
            ema.copy_to(unet.parameters())
        with autocast(self.trainer.device, self.trainer.amp):
            self.pipeline(
                batch_size=self.num_images,
                num_inference_steps=2 if warm_up else self.num_steps,
                generator=torch.Generator().manual_seed(0),
                output_type="np",
            )
        if ema is not None:
            ema.restore(unet.parameters())
        return time.perf_counter() - start
