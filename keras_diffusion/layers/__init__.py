from keras_diffusion.layers.attention_block import AttentionBlock
from keras_diffusion.layers.residual_block import ResidualBlock
from keras_diffusion.layers.timestep_embedding import TimestepEmbedding

__all__ = ["AttentionBlock", "ResidualBlock", "TimestepEmbedding"]
