"""Adapters of a denoiser's layers: LoRA (`lora`: which layers, the freeze,
the factors saved apart; `lora_model`: `enable_lora`, `merge_lora` on a
whole `DiffusionModel`)."""

from keras_diffusion.adapters.lora_model import enable_lora, merge_lora

__all__ = ["enable_lora", "merge_lora"]
