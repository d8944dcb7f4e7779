"""DynamicConv and LightConv cores (Wu et al., 2019) around ``talk_hf.ops``.

DynamicConv: kernel = softmax_K(Linear(conv_dim -> H*K, no bias)(u)) per token; LightConv: one
learned (H, K) kernel per layer, softmax over K.  Both get DropConnect (``weight_dropout``).
Causal (decoder) cores look K - 1 tokens back; encoder cores are centred (K // 2 to the left).
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops import DocumentEdges, dynamic_conv, dynamic_conv_step, light_conv
from ..transformers_internals import init
from .dropout import dropout
from .initialization import InitializesItself
from .linear_layer import Linear
from .mixer_block import pad_to_context


class _ConvCore(nn.Module):
    """Kernel geometry shared by both cores: size, heads, left padding, cache history."""

    def __init__(self, heads: int, kernel_size: int, causal: bool, weight_dropout: float):
        super().__init__()
        self.heads = heads
        self.kernel_size = kernel_size
        self.padding_l = kernel_size - 1 if causal else kernel_size // 2
        self.weight_dropout = weight_dropout

    @property
    def history_size(self) -> int:
        """Past mixer inputs a causal decoding step needs: K - 1."""
        return self.kernel_size - 1

    def normalize(self, logits: torch.Tensor) -> torch.Tensor:
        """Softmax over the last (kernel) dim, then DropConnect."""
        weight = torch.softmax(logits.float(), dim=-1).to(logits.dtype)
        return dropout(weight, self.weight_dropout, self.training)


class DynamicConvCore(_ConvCore):
    """(B, T, C) -> (B, T, C) with a kernel predicted from each token (see module docstring)."""

    def __init__(self, conv_dim: int, heads: int, kernel_size: int, causal: bool, weight_dropout: float):
        super().__init__(heads, kernel_size, causal, weight_dropout)
        self.weight_proj = Linear(conv_dim, heads * kernel_size, bias=False)

    def forward(
        self, u: torch.Tensor, context: torch.Tensor | None = None, document_edges: DocumentEdges | None = None
    ) -> torch.Tensor:
        """u: (B, T, C) zeroed mixer input; context: (B, K - 1 + T, C) previous inputs then u, or None;
        document_edges: the `DocumentEdges` of packed rows (taps outside a token's document read
        zero), only without a context, or None."""
        batch, length, _ = u.shape
        logits = self.weight_proj(u)
        if context is not None and length == 1:  # a decoding step: the new token's (B, H, K) kernel, viewed as such
            return dynamic_conv_step(context, self.normalize(logits.view(batch, self.heads, self.kernel_size)))
        weight = self.normalize(logits.view(batch, length, self.heads, self.kernel_size))
        if context is None:
            return dynamic_conv(u, weight, self.padding_l, document_edges=document_edges)
        return dynamic_conv(context, pad_to_context(weight, context), self.padding_l)[:, -length:]


class LightConvCore(_ConvCore, InitializesItself):
    """(B, T, C) -> (B, T, C) with one learned kernel per head, shared over time."""

    def __init__(self, conv_dim: int, heads: int, kernel_size: int, causal: bool, weight_dropout: float):
        super().__init__(heads, kernel_size, causal, weight_dropout)
        self.weight = nn.Parameter(torch.empty(heads, kernel_size))

    def init_weights(self) -> None:
        """The (H, K) kernel logits, Xavier-uniform as in fairseq."""
        init.xavier_uniform_(self.weight)

    def forward(
        self, u: torch.Tensor, context: torch.Tensor | None = None, document_edges: DocumentEdges | None = None
    ) -> torch.Tensor:
        """u: (B, T, C) zeroed mixer input; context: (B, K - 1 + T, C) previous inputs then u, or None;
        document_edges: as `DynamicConvCore`'s."""
        # The kernel parameter stays float32 under autocast while u is bf16/fp16: the op wants one dtype.
        weight = self.normalize(self.weight).to(u.dtype)
        if context is None:
            return light_conv(u, weight, self.padding_l, document_edges=document_edges)
        if u.shape[1] == 1:  # the (1, H, K) kernel serves every row
            return dynamic_conv_step(context, weight.unsqueeze(0))
        return light_conv(context, weight, self.padding_l)[:, -u.shape[1] :]
