from keras_diffusion.layers.attention_block import AttentionBlock
from keras_diffusion.layers.residual_block import ResidualBlock
from keras_diffusion.layers.timestep_embedding import TimestepEmbedding
from keras_diffusion.layers.transformer_block import CrossAttention, TransformerBlock

__all__ = [
    "AttentionBlock",
    "CrossAttention",
    "ResidualBlock",
    "TimestepEmbedding",
    "TransformerBlock",
]
