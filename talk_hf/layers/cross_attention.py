"""Multi-head cross-attention from decoder tokens to the encoder output (SDPA).

Keys and values of the encoder output are computed once per generation and kept in the
cross-attention part of the ``EncoderDecoderCache``.  A source may serve several consecutive decoder
rows (the beams of one sentence: rows = sources x n): those rows' queries attend as one longer query of
their source (`per_source`), so the source's keys and values are held and read once, not once per row.
With ``output_attentions`` the block takes a plain softmax path so that it can return the attention
weights; both paths give a row whose source is padding only no attention (zero weights, as SDPA does).  The decoder stack broadcasts the
source mask once per forward (`broadcast_source_mask`) and hands it to every layer's block.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..transformers_internals import cross_attention_keys_values
from .linear_layer import Linear
from .residual import NormedResidual


def broadcast_source_mask(encoder_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) source mask, nonzero at real source tokens -> (B, 1, 1, S) bool, the mask every
    `CrossAttentionBlock` of a decoder forward reads (None stays None).  Computed once per forward, not
    once per layer: each decoding step indexes and casts the mask once, whatever the number of layers."""
    return None if encoder_mask is None else encoder_mask[:, None, None, :].to(torch.bool)


def per_source(rows: torch.Tensor, sources: int) -> torch.Tensor:
    """(R, T, C) rows, R = sources x n, each n consecutive rows reading one source (the beams of a
    sentence) -> (sources, n x T, C): each source's rows as one sequence of queries (a view)."""
    return rows.reshape(sources, -1, rows.shape[-1])


class CrossAttentionBlock(nn.Module):
    """Cross-attention sublayer with its residual connection; (B, T, d) -> (B, T, d)."""

    def __init__(self, d_model: int, heads: int, attention_dropout: float, dropout: float, normalize_before: bool):
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.attention_dropout = attention_dropout
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.out_proj = Linear(d_model, d_model)
        self.residual = NormedResidual(d_model, normalize_before, dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d) -> (B, heads, L, head_dim)."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def project_keys_values(self, encoder_hidden: torch.Tensor):
        """(B, S, d) encoder output -> (B, heads, S, head_dim) keys and values: what the generation cache
        keeps per source, and what an exported encoder computes for every decoding step (`talk_hf.export`)."""
        return self._split_heads(self.k_proj(encoder_hidden)), self._split_heads(self.v_proj(encoder_hidden))

    def forward(
        self,
        hidden: torch.Tensor,
        encoder_hidden: torch.Tensor,
        source_mask: torch.Tensor | None,
        cache=None,
        layer_idx: int = 0,
        output_attentions: bool = False,
    ):
        """
        Args:
            hidden: (R, T, d) decoder states, R = B x n: each n consecutive rows read one source (n = 1
                but in an exported beam step, whose beams share their sentence's keys and values).
            encoder_hidden: (B, S, d) encoder output.
            source_mask: (B, 1, 1, S) bool, True at real source tokens (`broadcast_source_mask`), or
                None.
            cache: the cross-attention `DynamicCache` of an `EncoderDecoderCache`, or None.
            layer_idx: this layer's index in that cache.
            output_attentions: also return the (R, heads, T, S) attention weights.

        Returns:
            ``(hidden, weights)``: (R, T, d) block output and the (R, heads, T, S) weights or None.
        """
        keys, values = cross_attention_keys_values(cache, layer_idx, lambda: self.project_keys_values(encoder_hidden))
        queries = self._split_heads(per_source(self.q_proj(self.residual.pre(hidden)), keys.shape[0]))
        dropout = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:
            scores = queries @ keys.transpose(-1, -2) / math.sqrt(self.head_dim)
            scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # half types: softmax in float32
            if source_mask is not None:
                scores = scores.masked_fill(~source_mask, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1)
            if source_mask is not None:  # a source of padding only attends to nothing, as SDPA's path
                weights = weights.masked_fill(~source_mask.any(dim=-1, keepdim=True), 0.0)
            weights = weights.to(queries.dtype)
            attended = nn.functional.dropout(weights, p=dropout, training=self.training) @ values
            rows, length = hidden.shape[:2]  # (B, heads, n x T, S) -> (R, heads, T, S)
            weights = weights.unflatten(2, (-1, length)).transpose(1, 2).reshape(rows, self.heads, length, -1)
        else:
            attended = nn.functional.scaled_dot_product_attention(
                queries, keys, values, attn_mask=source_mask, dropout_p=dropout
            )
        attended = attended.transpose(1, 2).reshape(hidden.shape)  # (B, heads, n x T, hd) -> (R, T, d)
        return self.residual.post(self.out_proj(attended), hidden), weights
