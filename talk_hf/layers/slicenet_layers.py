"""SliceNet's layers: the units its stacks repeat, checkpoint and shard.

    encoder layer:  x -> ConvModule(x) * mask -> [dropout]
    IO mixer:       e -> ConvStep_{2d -> d}([attention(e) ; e])         (once, before the decoder layers)
    decoder layer:  x -> m = [dropout](ConvModule(x)) -> m + attention(m)   (t2t; paper: m + attention(x))

"[dropout]" runs only with ``dropout_placement="module"`` (the paper); t2t drops out once per stack.
The layers are `GradientCheckpointingLayer`s: with gradient checkpointing on, transformers recomputes
them in the backward pass (training never uses the generation cache).
"""

from __future__ import annotations

import torch
from torch import nn

from ..transformers_internals import GradientCheckpointingLayer
from .slicenet_attention import SliceAttention, SourceBias
from .slicenet_conv import ConvModule, ConvStep


class SliceNetEncoderLayer(GradientCheckpointingLayer):
    """A bidirectional ConvModule whose output is zero at padded positions: (B, S, d) -> (B, S, d).

    Args:
        module: the `ConvModule` (non-causal).
        dropout: dropout on the output (0 unless the dropout is placed per module).
    """

    def __init__(self, module: ConvModule, dropout: float):
        super().__init__()
        self.module = module
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """hidden: (B, S, d); padding_mask: (B, S) bool, True at real tokens, or None."""
        out = self.module(hidden, padding_mask)
        if padding_mask is not None:
            out = out * padding_mask.unsqueeze(-1).to(out.dtype)
        return self.dropout(out)


class SliceNetIOMixer(GradientCheckpointingLayer):
    """The paper's IOMixer(i, o) = ConvStep([attention(i, o) ; o]): (B, T, d) target embeddings ->
    (B, T, d), the input of the first decoder layer.

    Args:
        attention: the `SliceAttention` block that reads the source for the embeddings.
        mix: the causal `ConvStep` from 2 d to d channels (t2t: k = 3, 4-group sub-separable).
    """

    def __init__(self, attention: SliceAttention, mix: ConvStep):
        super().__init__()
        self.attention = attention
        self.mix = mix

    def forward(
        self,
        embedded: torch.Tensor,
        timing: torch.Tensor,
        source: torch.Tensor,
        source_bias: SourceBias,
        padding_mask: torch.Tensor | None = None,
        cache=None,
    ):
        """Arguments as `SliceAttention.forward` (``embedded`` is its x); returns
        ``(hidden (B, T, d), attention weights (B, T, S))``."""
        attended, weights = self.attention(embedded, timing, source, source_bias, padding_mask, cache)
        return self.mix(torch.cat([attended, embedded], dim=-1), padding_mask, cache), weights


class SliceNetDecoderLayer(GradientCheckpointingLayer):
    """The paper's AttnConvModule: a causal ConvModule, then attention to the source.

    Args:
        module: the causal `ConvModule`.
        attention: the `SliceAttention` block.
        attention_residual: ``"t2t"`` (the query comes from the module output m, and the block
            returns LN(m + Attend)) or ``"paper"`` (the query comes from the layer input).
        dropout: dropout on the module output (0 unless the dropout is placed per module).
    """

    def __init__(self, module: ConvModule, attention: SliceAttention, attention_residual: str, dropout: float):
        super().__init__()
        self.module = module
        self.attention = attention
        self.query_from_input = attention_residual == "paper"
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        hidden: torch.Tensor,
        timing: torch.Tensor,
        source: torch.Tensor,
        source_bias: SourceBias,
        padding_mask: torch.Tensor | None = None,
        cache=None,
    ):
        """
        Args:
            hidden: (B, T, d) layer input.
            timing: (B or 1, T, d) timing signal of the target positions.
            source / source_bias: (B, S, d) encoder output and its `attention_bias`.
            padding_mask: (B, T) bool, True at real target tokens, or None.
            cache: the decoder's `ConvCache`, or None.

        Returns:
            ``(hidden (B, T, d), attention weights (B, T, S))``.
        """
        module_out = self.dropout(self.module(hidden, padding_mask, cache))
        query_input = hidden if self.query_from_input else module_out
        attended, weights = self.attention(query_input, timing, source, source_bias, padding_mask, cache)
        return module_out + attended, weights
