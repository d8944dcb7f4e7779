"""The models' building blocks: mixer cores (TaLK, DynamicConv, LightConv), the residual blocks
around them, cross-attention, feed-forward, sinusoidal positions and the encoder/decoder layers."""

from .conv_layers import ConvDecoderLayer, ConvEncoderLayer
from .cross_attention import CrossAttentionBlock
from .dynamic_conv_mixer import DynamicConvCore, LightConvCore
from .feed_forward import FeedForwardBlock
from .initialization import InitializesItself
from .mixer_block import MixerBlock, MixerCore
from .sinusoidal_positions import SinusoidalPositions, positions_from_mask
from .talk_mixer import TaLKCore

__all__ = [
    "ConvDecoderLayer",
    "ConvEncoderLayer",
    "CrossAttentionBlock",
    "DynamicConvCore",
    "FeedForwardBlock",
    "InitializesItself",
    "LightConvCore",
    "MixerBlock",
    "MixerCore",
    "SinusoidalPositions",
    "TaLKCore",
    "positions_from_mask",
]
