"""The residual wiring every block shares: [pre-LN] -> sublayer -> dropout -> + residual -> [post-LN]."""

from __future__ import annotations

import torch
from torch import nn

from .dropout import dropout


class NormedResidual(nn.Module):
    """LayerNorm placement and output dropout of one residual block.

    Use as ``y = sublayer(res.pre(x)); x = res.post(y, x)``.
    """

    def __init__(self, d_model: int, normalize_before: bool, dropout: float):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_model)
        self.normalize_before = normalize_before
        self.dropout = dropout

    def pre(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, d) block input -> the sublayer's input (normalised when pre-norm)."""
        return self.layer_norm(hidden) if self.normalize_before else hidden

    def post(self, output: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Sublayer output (B, T, d) + residual (B, T, d) -> block output (normalised when post-norm)."""
        hidden = residual + dropout(output, self.dropout, self.training)
        return hidden if self.normalize_before else self.layer_norm(hidden)
