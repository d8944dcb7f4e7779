"""Sinusoidal position embeddings (Vaswani et al.), computed from explicit positions.

Positions come from the attention mask, so a left-padded row sees the same positions as the
same row without padding (the first real token is position 0).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..transformers_internals import init
from .initialization import InitializesItself


def positions_from_mask(attention_mask: torch.Tensor | None, length: int, past_length: int, device) -> torch.Tensor:
    """Positions of the last ``length`` tokens.

    Args:
        attention_mask: (B, past_length + length) with 1 at real tokens, or None (no padding).
        length: number of new tokens T.
        past_length: tokens already seen (the cache's length).

    Returns:
        (B, T) long positions (or (1, T) without a mask); padding gets position 0.
    """
    if attention_mask is None:
        return torch.arange(past_length, past_length + length, device=device).unsqueeze(0)
    positions = attention_mask.long().cumsum(-1) - 1
    return positions[:, -length:].clamp(min=0)


class SinusoidalPositions(InitializesItself):
    """Maps positions (B, T) to (B, T, dim) embeddings: [sin(p * f_i), cos(p * f_i)], f_i geometric.

    ``inv_freq`` is a non-persistent buffer; ``compute_inv_freq`` rebuilds it (models are built on
    the meta device, so `init_weights` refills it).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)

    def compute_inv_freq(self) -> torch.Tensor:
        """(dim // 2,) frequencies from 1 down to 1 / 10000."""
        half = self.dim // 2
        return torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))

    def init_weights(self) -> None:
        init.copy_(self.inv_freq, self.compute_inv_freq())

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """(B, T) long positions -> (B, T, dim) float32."""
        angles = positions.unsqueeze(-1) * self.inv_freq  # long * float32 -> float32
        embedding = torch.cat([angles.sin(), angles.cos()], dim=-1)
        if self.dim % 2:
            embedding = nn.functional.pad(embedding, (0, 1))
        return embedding
