"""talk_hf: TaLK convolutions and DynamicConv/LightConv for HuggingFace Transformers."""

from . import ops
from .version import __version__

__all__ = ["ops", "__version__"]
