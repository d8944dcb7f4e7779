"""Position-wise feed-forward block: Linear(d -> ffn) -> activation -> dropout -> Linear(ffn -> d)."""

from __future__ import annotations

import torch
from torch import nn

from ..transformers_internals import ACT2FN
from .dropout import dropout
from .linear_layer import Linear
from .residual import NormedResidual


class FeedForwardBlock(nn.Module):
    """The FFN sublayer with its residual connection; (B, T, d) -> (B, T, d)."""

    def __init__(
        self,
        d_model: int,
        ffn_dim: int,
        activation: str,
        activation_dropout: float,
        dropout: float,
        normalize_before: bool,
    ):
        super().__init__()
        self.fc1 = Linear(d_model, ffn_dim)
        self.fc2 = Linear(ffn_dim, d_model)
        self.activation = ACT2FN[activation]
        self.activation_dropout = activation_dropout
        self.residual = NormedResidual(d_model, normalize_before, dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        x = self.activation(self.fc1(self.residual.pre(hidden)))
        x = dropout(x, self.activation_dropout, self.training)
        return self.residual.post(self.fc2(x), hidden)
