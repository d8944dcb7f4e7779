"""The TaLK core: per-token window offsets, then the adaptive window sum (``talk_hf.ops.talk_conv``).

Encoder (bidirectional): offsets = sigmoid(Linear(conv_dim -> 2H)), H left and H right.
Decoder (causal):        offsets = sigmoid(Linear(conv_dim -> H)), left only.
Both then get dropout with p = ``offset_dropout``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops import DocumentEdges, talk_conv, talk_conv_step
from .dropout import dropout
from .linear_layer import Linear
from .mixer_block import pad_to_context


class TaLKCore(nn.Module):
    """(B, T, C) zeroed mixer input -> (B, T, C) window sums.

    Args:
        conv_dim: channels C.
        heads: heads H (C divisible by H); each head predicts its own offsets.
        max_offset: the layer's maximum reach in tokens (to the left, and to the right unless causal).
        causal: decoder form (left windows only).
        offset_dropout: dropout on the sigmoid offsets.
    """

    def __init__(self, conv_dim: int, heads: int, max_offset: int, causal: bool, offset_dropout: float):
        super().__init__()
        self.heads = heads
        self.max_left = max_offset
        self.max_right = 0 if causal else max_offset
        self.causal = causal
        self.offset_dropout = offset_dropout
        self.offset_proj = Linear(conv_dim, heads if causal else 2 * heads)

    @property
    def history_size(self) -> int:
        """Past mixer inputs a causal decoding step needs: the farthest left edge is max_left back."""
        return self.max_left

    def forward(
        self, u: torch.Tensor, context: torch.Tensor | None = None, document_edges: DocumentEdges | None = None
    ) -> torch.Tensor:
        """
        Args:
            u: (B, T, C) mixer input, zero at padded positions.
            context: (B, S + T, C) the previous S mixer inputs, then u (causal decoding with a
                cache), or None.
            document_edges: the `DocumentEdges` of packed rows (the windows are clamped at their
                document's edges), only without a context; or None.

        Returns:
            (B, T, C).
        """
        offsets = torch.sigmoid(self.offset_proj(u))
        offsets = dropout(offsets, self.offset_dropout, self.training)
        if self.causal:
            if context is None:
                return talk_conv(u, offsets, None, self.max_left, 0, document_edges=document_edges)
            if u.shape[1] == 1:  # a decoding step: the new token's window over its context
                return talk_conv_step(context, offsets, self.max_left)
            out = talk_conv(context, pad_to_context(offsets, context), None, self.max_left, 0)
            return out[:, -u.shape[1] :]
        offset_left, offset_right = offsets.split(self.heads, dim=-1)
        if self.max_right == 0:
            return talk_conv(u, offset_left, None, self.max_left, 0, document_edges=document_edges)
        return talk_conv(
            u,
            offset_left.contiguous(),
            offset_right.contiguous(),
            self.max_left,
            self.max_right,
            document_edges=document_edges,
        )
