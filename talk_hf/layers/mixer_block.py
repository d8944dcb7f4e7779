"""The mixer block around a sequence-mixing core (TaLK, DynamicConv or LightConv).

    [pre-LN] -> input dropout -> Linear(d -> 2*conv_dim) + GLU  (or Linear(d -> conv_dim))
             -> zero padded positions -> core -> Linear(conv_dim -> d) -> dropout -> + residual -> [post-LN]

A core (`MixerCore`) maps the zeroed mixer input u (B, T, C) to (B, T, C).  In the decoder it may
also get ``context``: the last ``core.history_size`` mixer inputs before u, kept by the generation cache,
then u itself (B, S + T, C), so a decoding step only sees a bounded history.
"""

from __future__ import annotations

import inspect
from typing import Protocol

import torch
from torch import nn

from ..ops.documents import DocumentEdges
from .dropout import dropout
from .linear_layer import Linear
from .residual import NormedResidual


def pad_to_context(per_token: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """Zero-pad per-token parameters in front, in time, to the length of the context they go with.

    Args:
        per_token: (B, T, H, ...) per-token parameters of the T new inputs (offsets or kernels).
        context: (B, S + T, C) the cached history, then the new inputs.

    Returns:
        (B, S + T, H, ...).  The history rows' outputs are not needed (the caller keeps the last T),
        so zeros do for their parameters.
    """
    past_length = context.shape[1] - per_token.shape[1]
    if past_length == 0:
        return per_token
    return nn.functional.pad(per_token, (0, 0) * (per_token.dim() - 2) + (past_length, 0))


def token_multiplier(attention_mask: torch.Tensor | None, length: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The mixer blocks' padding zeroing, made once per layer stack rather than in every block.

    Args:
        attention_mask: (B, past + T) with 1 (or True) at real tokens and 0 (False) at padding, or None
            (the models check its values: `talk_hf.models.input_checks.check_mask_values`).
        length: T, the new tokens (the mask's last T columns).
        dtype: the hidden states' dtype.

    Returns:
        (B, T, 1) of ``dtype``, 1 at real tokens and 0 at padding, or None: the mask's values as they
        are, cast once (a traced step holds one Cast).
    """
    if attention_mask is None:
        return None
    return attention_mask[:, attention_mask.shape[1] - length :, None].to(dtype)


def takes_document_edges(core_class: type) -> bool:
    """Whether a core's forward takes ``document_edges`` (packed rows; see `MixerCore`)."""
    return "document_edges" in inspect.signature(core_class.forward).parameters


class MixerCore(Protocol):
    """What a mixer block needs of its core (TaLK, DynamicConv, LightConv, or a new family's)."""

    @property
    def history_size(self) -> int:
        """Past mixer inputs S that a causal step needs (the generation cache keeps that many)."""

    def __call__(
        self, u: torch.Tensor, context: torch.Tensor | None = None, document_edges: DocumentEdges | None = None
    ) -> torch.Tensor:
        """u: (B, T, C) mixer input, zero at padding; context: (B, history_size + T, C), the cached history
        then u (causal decoding with a cache), or None (no cache, or no token before u: the causal
        step then reads zeros before the start); document_edges: the `talk_hf.ops.DocumentEdges` of
        packed rows (B, T), handed to the ops as they are (a window never reaches past its document's
        edges), only without a context, or None.  Returns (B, T, C).  A core that cannot honour
        ``document_edges`` leaves the parameter out, and packed rows are refused for it."""


class MixerBlock(nn.Module):
    """Input projection (+GLU), padding zeroing, the core, output projection, residual."""

    def __init__(
        self,
        d_model: int,
        conv_dim: int,
        core: MixerCore,
        use_glu: bool,
        input_dropout: float,
        dropout: float,
        normalize_before: bool,
    ):
        super().__init__()
        self.use_glu = use_glu
        self.input_dropout = input_dropout
        self.in_proj = Linear(d_model, 2 * conv_dim if use_glu else conv_dim)
        self.core = core
        # Read at construction: torch.compile traces no signature inspection in the forward.
        self.core_takes_document_edges = takes_document_edges(type(core))
        self.out_proj = Linear(conv_dim, d_model)
        self.residual = NormedResidual(d_model, normalize_before, dropout)

    def forward(
        self,
        hidden: torch.Tensor,
        real_tokens: torch.Tensor | None,
        state=None,
        document_edges: DocumentEdges | None = None,
    ) -> torch.Tensor:
        """
        Args:
            hidden: (B, T, d) block input.
            real_tokens: (B, T, 1) of hidden's dtype, 1 at real tokens and 0 at padding (see
                `token_multiplier`), or None.
            state: the layer's `ConvHistoryLayer` of the generation cache, or None.
            document_edges: the `DocumentEdges` of packed rows (see `MixerCore`), or None.

        Returns:
            (B, T, d) block output.
        """
        x = self.residual.pre(hidden)
        x = dropout(x, self.input_dropout, self.training)
        u = self.in_proj(x)
        if self.use_glu:
            u = nn.functional.glu(u, dim=-1)
        if real_tokens is not None:  # under autocast u may be in another dtype than the hidden states
            u = u * (real_tokens if real_tokens.dtype == u.dtype else real_tokens.to(u.dtype))
        context = state.extend(u) if state is not None else None
        if document_edges is None or not self.core_takes_document_edges:
            # A core without document edges gets only rows of one document each (a model refuses packed
            # rows for it, `refuse_cores_without_documents`): edges of documents that start only at a
            # row's first real token change nothing there.
            mixed = self.core(u, context)
        else:
            mixed = self.core(u, context, document_edges=document_edges)
        return self.residual.post(self.out_proj(mixed), hidden)
