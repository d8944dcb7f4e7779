"""``nn.Linear`` that runs `talk_hf.ops.linear`: the same parameters, state dict and results (to
rounding), with the C++ few-row kernel for the one-token steps of decoding on the CPU."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.linear import linear


class Linear(nn.Linear):
    """(..., in_features) -> (..., out_features), as ``nn.Linear``; see `talk_hf.ops.linear` for
    when the C++ kernel runs instead of ``F.linear``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return linear(input, self.weight, self.bias)
