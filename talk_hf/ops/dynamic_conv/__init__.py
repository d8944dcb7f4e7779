"""DynamicConv and LightConv (Wu et al., ICLR 2019): depthwise convolutions with head-shared kernels.

    out[b, t, c] = sum_k weight[b, t, h(c), k] * x[b, t + k - padding_l, c]      (dynamic_conv)
    out[b, t, c] = sum_k weight[h(c), k]       * x[b, t + k - padding_l, c]      (light_conv)

with ``h(c) = c // (C / H)`` and x taken as zero outside ``[0, T)``, and in a packed row
(``document_edges``, see :mod:`..documents`) outside the document of t: a packed document computes
what it computes alone (the weights are not renormalised).  The caller normalises the
kernel (softmax over K, then optional DropConnect).  ``padding_l = K - 1`` gives the causal
decoder form, ``K // 2`` the centred encoder form; any K >= 1 works, even K included.

This folder holds the ops: the public functions and their checks (here), their PyTorch paths
(`dynamic_torch`), their compiled kernels' registration (`dynamic_compiled`, csrc/dynamic_conv/)
and their loop-form definition, which every backend is tested against (`dynamic_naive`).
`dynamic_conv_step` is the causal form's one-token step, for both (LightConv's kernel is every token's).
"""

from __future__ import annotations

import torch

from .._backend import resolve_backend
from .._taps import last_token_sum
from .._validation import (
    check_heads_divide_channels,
    check_int,
    check_leading_dims,
    check_same_device_and_dtype,
    check_tensor,
)
from ..documents import DocumentEdges, checked_edges
from .dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from .dynamic_torch import dynamic_conv_torch, light_conv_torch


def dynamic_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    padding_l: int,
    *,
    document_edges: DocumentEdges | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Convolution whose kernel is predicted per token.

    Args:
        x: (B, T, C) input.
        weight: (B, T, H, K) kernels, already normalised; H must divide C.
        padding_l: how many of the K taps look into the past, in [0, K - 1].
        document_edges: None, or the `DocumentEdges` of a packed row (B, T) on x's device, derived
            from its position_ids: taps outside a token's document read zero.
        backend: ``"auto"``, ``"torch"``, ``"cpu"`` or ``"cuda"``; ``None`` reads ``$TALK_HF_BACKEND``.

    Returns:
        (B, T, C) tensor of x's dtype, accumulated in float32 (float64 for float64 input).
    """
    check_tensor("x", x, 3, "(B, T, C)")
    check_tensor("weight", weight, 4, "(B, T, H, K)")
    check_leading_dims("weight", weight, x, 2)
    _check_kernel(x, weight, padding_l)
    edges = checked_edges(document_edges, x)
    if resolve_backend(backend, x.device) == "torch":
        return dynamic_conv_torch(x, weight, padding_l, edges)
    return compiled_dynamic_conv(x, weight, padding_l, edges)


def light_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    padding_l: int,
    *,
    document_edges: DocumentEdges | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Convolution with one kernel per head, shared by every token.

    Args:
        x: (B, T, C) input.
        weight: (H, K) kernels, already normalised; H must divide C.
        padding_l: how many of the K taps look into the past, in [0, K - 1].
        document_edges: None, or the `DocumentEdges` of a packed row (B, T) on x's device, derived
            from its position_ids: taps outside a token's document read zero.
        backend: ``"auto"``, ``"torch"``, ``"cpu"`` or ``"cuda"``; ``None`` reads ``$TALK_HF_BACKEND``.

    Returns:
        (B, T, C) tensor of x's dtype, accumulated in float32 (float64 for float64 input).
    """
    check_tensor("x", x, 3, "(B, T, C)")
    check_tensor("weight", weight, 2, "(H, K)")
    _check_kernel(x, weight, padding_l)
    edges = checked_edges(document_edges, x)
    if resolve_backend(backend, x.device) == "torch":
        return light_conv_torch(x, weight, padding_l, edges)
    return compiled_light_conv(x, weight, padding_l, edges)


def dynamic_conv_step(context: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Causal `dynamic_conv` (``padding_l = K - 1``) at the last row of ``context`` only: a decoding step.

    Args:
        context: (B, K, C) the token's K - 1 previous inputs (zeros before the start), then its own.
        weight: (B, H, K) the token's kernel, already normalised, or (1, H, K) one kernel for every row
            (LightConv's); H must divide C.

    Returns:
        (B, 1, C) of context's dtype, accumulated in float32 (float64 for float64 input): what
        ``dynamic_conv(context, w, K - 1)[:, -1:]`` gives, with ``w`` the token's kernel at the last row.
    """
    check_tensor("context", context, 3, "(B, K, C)")
    check_tensor("weight", weight, 3, "(B, H, K)")
    if weight.shape[0] not in (1, context.shape[0]) or weight.shape[2] != context.shape[1]:
        raise ValueError(
            f"weight must have shape (B, H, K) or (1, H, K) with B = {context.shape[0]} and K = {context.shape[1]} "
            f"for a context of shape {tuple(context.shape)}, got {tuple(weight.shape)}"
        )
    check_heads_divide_channels(context.shape[2], weight.shape[1], "weight.shape[1]")
    check_same_device_and_dtype("context", context, weight=weight)
    return last_token_sum(context, weight)


def _check_kernel(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> None:
    """Checks shared by both ops: heads divide C, K >= 1, padding_l in range, same device/dtype."""
    heads, kernel_size = weight.shape[-2], weight.shape[-1]
    check_heads_divide_channels(x.shape[2], heads, "weight.shape[-2]")
    if kernel_size < 1:
        raise ValueError(f"weight must have a kernel size K >= 1 in its last dim, got shape {tuple(weight.shape)}")
    check_int("padding_l", padding_l, 0, kernel_size - 1)
    check_same_device_and_dtype("x", x, weight=weight)
