"""SliceNet's timing signal and its single-head inner-product attention to the source.

"Simple" attention (tensor2tensor, June 2017): no projections and one head; the source (the encoder
output) is both keys and values.  Only causal convolutions mix decoder positions, so a decoder
query depends on a bounded window of the past (see ``SliceNetDecoder``).  A row whose source is padding
only attends to nothing (zero weights), as the other families' cross-attention (torch's SDPA) does.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from ..ops._precision import accumulation_dtype
from ..transformers_internals import init
from .cross_attention import per_source
from .initialization import InitializesItself
from .slicenet_conv import T2T_INIT, ConvInit, ConvStep


class TimingSignal(InitializesItself):
    """Positions (B, T) -> (B, T, depth) sinusoids.

    t2t (``num_timescales`` n): [sin(p * f_0..f_{n-1}), cos(p * f_0..f_{n-1}), zeros], with
    f_i = min_timescale * exp(-i * ln(max_timescale / min_timescale) / (n - 1)), so only the first
    2n channels carry timing.  The paper (``num_timescales=None``): channel 2i holds
    sin(p / max_timescale^(2i / depth)) and channel 2i + 1 the cos, over the whole depth.

    ``inv_freq`` is a non-persistent buffer; ``compute_inv_freq`` rebuilds it (models are built on
    the meta device, so `init_weights` refills it).
    """

    def __init__(self, depth: int, num_timescales: int | None, min_timescale: float, max_timescale: float):
        super().__init__()
        self.depth = depth
        self.num_timescales = num_timescales
        self.min_timescale = min_timescale
        self.max_timescale = max_timescale
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)

    def compute_inv_freq(self) -> torch.Tensor:
        """(n,) frequencies for t2t's signal, or (ceil(depth / 2),) for the paper's."""
        if self.num_timescales is None:
            pairs = torch.arange(0, self.depth, 2, dtype=torch.float32)
            return torch.exp(pairs / self.depth * -math.log(self.max_timescale))
        increment = math.log(self.max_timescale / self.min_timescale) / max(self.num_timescales - 1, 1)
        return self.min_timescale * torch.exp(torch.arange(self.num_timescales, dtype=torch.float32) * -increment)

    def init_weights(self) -> None:
        init.copy_(self.inv_freq, self.compute_inv_freq())

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions: (B, T) (or (1, T)) absolute positions -> (B, T, depth) float32."""
        angles = positions.unsqueeze(-1).float() * self.inv_freq
        if self.num_timescales is None:
            return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)[..., : self.depth]
        signal = torch.cat([angles.sin(), angles.cos()], dim=-1)
        return nn.functional.pad(signal, (0, self.depth - signal.shape[-1]))


class SourceBias(NamedTuple):
    """What `simple_attention` applies for the source's padding, prepared once per decoder forward
    (`attention_bias`) for all its attention blocks.

    additive: (B, 1, S) added to the scaled logits, in float32 (float64 for float64 sources): 0 at real
        source tokens, the dtype's lowest number at padded ones.
    attends: (B, 1, 1) in the same dtype, what each row's weights are multiplied by: 1 where the source
        has a real token, 0 where it is padding only (that row attends to nothing: zero weights and a
        zero output, as torch's SDPA gives the other families' cross-attention); None without a mask.
    """

    additive: torch.Tensor
    attends: torch.Tensor | None


def attention_bias(source: torch.Tensor, source_mask: torch.Tensor | None) -> SourceBias:
    """The `SourceBias` of ``source`` (B, S, d), the encoder output, and ``source_mask`` (B, S),
    nonzero at real source tokens, or None."""
    dtype = accumulation_dtype(source.dtype)
    additive = source.new_zeros(source.shape[0], 1, source.shape[1], dtype=dtype)
    if source_mask is None:
        return SourceBias(additive, None)
    real = source_mask.bool().unsqueeze(1)
    additive = additive.masked_fill_(~real, torch.finfo(dtype).min)
    return SourceBias(additive, real.any(dim=-1, keepdim=True).to(dtype))


def simple_attention(query: torch.Tensor, source: torch.Tensor, bias: SourceBias):
    """Attend(source, query) = softmax(query . source^T / sqrt(d)) . source, one head.

    Args:
        query: (R, T, d), R = B x n: each n consecutive rows read one source (`per_source`).
        source: (B, S, d), the keys and the values.
        bias: the `attention_bias` of the source's padding.

    Returns:
        ``(attended (R, T, d), weights (R, T, S))``; the logits are scaled, masked and normalised in
        float32 at least (the encoder output is an un-normalised residual sum: bf16/fp16 logits
        saturate), padded sources get weight 0, and a row whose source is padding only gets weight 0
        everywhere (its attended output is zeros).
    """
    rows, length = query.shape[:2]
    query = per_source(query, source.shape[0])  # (B, n x T, d)
    # bias + logits / sqrt(d), promoted to the bias' float32
    scores = torch.add(bias.additive, torch.bmm(query, source.transpose(1, 2)), alpha=1 / math.sqrt(query.shape[-1]))
    weights = torch.softmax(scores, dim=-1)
    if bias.attends is not None:
        weights = weights * bias.attends
    if weights.dtype != source.dtype:
        weights = weights.to(source.dtype)
    attended = torch.bmm(weights, source)
    return attended.reshape(rows, length, -1), weights.reshape(rows, length, -1)


class SliceAttention(nn.Module):
    """The attention block: a query from causal ConvSteps over x + timing, then `simple_attention`.

    ``residual="t2t"``: returns LN(x + Attend(source, q)); ``"paper"``: returns Attend(source, q).

    Args:
        d_model: channels.
        kernel_sizes / dilations / separabilities: of the query steps (t2t: 5, 5 / 1, 4).
        residual: ``"t2t"`` or ``"paper"``.
        eps: LayerNorm epsilon.
        conv_init: how the query steps' convolutions are initialised.
    """

    def __init__(
        self,
        d_model: int,
        kernel_sizes: list[int],
        dilations: list[int],
        separabilities: list[int],
        residual: str,
        eps: float,
        conv_init: ConvInit = T2T_INIT,
    ):
        super().__init__()
        self.query_steps = nn.ModuleList(
            ConvStep(d_model, d_model, kernel, dilation, separability, causal=True, eps=eps, conv_init=conv_init)
            for kernel, dilation, separability in zip(kernel_sizes, dilations, separabilities, strict=True)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if residual == "t2t" else None

    def forward(
        self,
        x: torch.Tensor,
        timing: torch.Tensor,
        source: torch.Tensor,
        source_bias: SourceBias,
        padding_mask: torch.Tensor | None = None,
        cache=None,
    ):
        """
        Args:
            x: (R, T, d) decoder states, R = B x n: each n consecutive rows read one source (`per_source`).
            timing: (B or 1, T, d) timing signal of their positions.
            source / source_bias: (B, S, d) encoder output and its `attention_bias`.
            padding_mask: (B, T) bool, True at real target tokens, or None.
            cache: the decoder's `ConvCache`, or None.

        Returns:
            ``(out (R, T, d), weights (R, T, S))``.
        """
        query = x + timing
        for step in self.query_steps:
            query = step(query, padding_mask, cache)
        attended, weights = simple_attention(query, source, source_bias)
        return (attended if self.norm is None else self.norm(x + attended)), weights
