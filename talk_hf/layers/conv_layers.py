"""Encoder and decoder layers: a mixer block, [cross-attention,] a feed-forward block.

The layers are `GradientCheckpointingLayer`s: with gradient checkpointing on, transformers
recomputes them in the backward pass (and drops the generation cache, which training never uses).
"""

from __future__ import annotations

import torch

from ..ops.documents import DocumentEdges
from ..transformers_internals import GradientCheckpointingLayer, split_cache
from .cross_attention import CrossAttentionBlock
from .feed_forward import FeedForwardBlock
from .mixer_block import MixerBlock


class ConvEncoderLayer(GradientCheckpointingLayer):
    """Mixer block then FFN; (B, T, d) -> (B, T, d)."""

    def __init__(self, mixer: MixerBlock, ffn: FeedForwardBlock):
        super().__init__()
        self.mixer = mixer
        self.ffn = ffn

    def forward(self, hidden: torch.Tensor, real_tokens: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        """hidden: (B, T, d); real_tokens: (B, T, 1) in hidden's dtype, 1 at real tokens, 0 at
        padding (`token_multiplier`), or None."""
        return self.ffn(self.mixer(hidden, real_tokens))


class ConvDecoderLayer(GradientCheckpointingLayer):
    """Causal mixer block, cross-attention (seq2seq only), FFN; (B, T, d) -> (B, T, d)."""

    def __init__(
        self,
        layer_idx: int,
        mixer: MixerBlock,
        ffn: FeedForwardBlock,
        cross_attention: CrossAttentionBlock | None = None,
    ):
        super().__init__()
        self.layer_idx = layer_idx
        self.mixer = mixer
        self.cross_attention = cross_attention
        self.ffn = ffn

    def forward(
        self,
        hidden: torch.Tensor,
        real_tokens: torch.Tensor | None = None,
        encoder_hidden: torch.Tensor | None = None,
        source_mask: torch.Tensor | None = None,
        past_key_values=None,
        output_attentions: bool = False,
        document_edges: DocumentEdges | None = None,
        **kwargs,
    ):
        """
        Args:
            hidden: (B, T, d) decoder states.
            real_tokens: (B, T, 1) in hidden's dtype, 1 at real target tokens, 0 at padding
                (`token_multiplier`), or None.
            encoder_hidden / source_mask: (B, S, d) encoder output and its (B, 1, 1, S) bool mask
                (`broadcast_source_mask`) (seq2seq).
            past_key_values: the generation cache (`ConvCache`, or `EncoderDecoderCache` around
                one), or None.
            output_attentions: also return the cross-attention weights.
            document_edges: the `DocumentEdges` of packed rows (the mixer's windows stop at the
                documents' edges), or None.

        Returns:
            ``(hidden, cross_attention_weights or None)``.
        """
        conv_cache, cross_cache = split_cache(past_key_values)
        state = conv_cache.layers[self.layer_idx] if conv_cache is not None else None
        hidden = self.mixer(hidden, real_tokens, state, document_edges)
        weights = None
        if self.cross_attention is not None:
            hidden, weights = self.cross_attention(
                hidden, encoder_hidden, source_mask, cross_cache, self.layer_idx, output_attentions
            )
        return self.ffn(hidden), weights
