"""Depthwise convolution with one static kernel per channel (SliceNet's separable steps):

    out[b, t, c] = sum_k weight[c, k] * u[b, t + k * dilation - left, c]

with u taken as zero outside ``[0, T)`` (in a packed row, ``document_edges``, see :mod:`..documents`:
outside the document of t, so a packed document computes what it computes alone) and ``left`` set
by the padding:

* ``padding="causal"``: ``left = (K - 1) * dilation``, every tap looks at the past (decoders); any
  K in [1, 63];
* ``padding="centred"``: ``left = (K // 2) * dilation``, the taps are centred on t (encoders, t2t's
  "SAME"); odd K in [1, 63] only (an even kernel has no centre).

u is x, or x through an input gate, SliceNet's ConvStep's ``relu(x) * input_mask[b, t]`` (each part
optional), which the compiled kernels apply as they read x: the gated input is never stored, for
the forward or for the backward.

Backends as for the other ops (:mod:`talk_hf.ops._backend`).

This folder holds the op: the public function and its checks (here), its PyTorch path
(`depthwise_torch`), its compiled kernels' registration (`depthwise_compiled`,
csrc/depthwise_conv/) and its loop-form definition, which every backend is tested against
(`depthwise_naive`).
"""

from __future__ import annotations

import torch

from .._backend import resolve_backend
from .._validation import check_int, check_same_device_and_dtype, check_tensor
from ..documents import DocumentEdges, checked_edges
from .depthwise_compiled import compiled_depthwise_conv
from .depthwise_torch import depthwise_conv_torch, gate_input

MAX_KERNEL_SIZE = 63
PADDINGS = ("causal", "centred")


def depthwise_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    dilation: int = 1,
    padding: str = "causal",
    relu_input: bool = False,
    input_mask: torch.Tensor | None = None,
    document_edges: DocumentEdges | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Depthwise (one kernel per channel) convolution along time, zero-padded to length T.

    Args:
        x: (B, T, C) input.
        weight: (C, K) kernels, one per channel; K in [1, 63], odd for ``"centred"``.
        dilation: spacing of the taps, an int >= 1.  Any size works: taps T or more steps apart
            never both read inside [0, T), so a dilation beyond T gives the result of dilation T.
        padding: ``"causal"`` (taps at t - (K-1)*dilation .. t) or ``"centred"`` (taps at
            t - (K//2)*dilation .. t + (K//2)*dilation).
        relu_input: convolve ``relu(x)`` instead of x.
        input_mask: (B, T) bool, or None: the rows of x where it is False (padding) count as zero,
            after the ReLU.
        document_edges: None, or the `DocumentEdges` of a packed row (B, T) on x's device, derived
            from its position_ids: taps outside a token's document read zero.
        backend: ``"auto"``, ``"torch"``, ``"cpu"`` or ``"cuda"``; ``None`` reads ``$TALK_HF_BACKEND``.

    Returns:
        (B, T, C) tensor of x's dtype, accumulated in float32 (float64 for float64 input).  The
        gradients are those of this sum: grad x (B, T, C), through the ReLU and the mask, and grad
        weight (C, K), summed over batch and time.
    """
    check_tensor("x", x, 3, "(B, T, C)")
    check_tensor("weight", weight, 2, "(C, K)")
    dilation, left = _check_depthwise(x, weight, dilation, padding)
    _check_input_gate(x, relu_input, input_mask)
    edges = checked_edges(document_edges, x)
    if resolve_backend(backend, x.device) == "torch":
        return depthwise_conv_torch(gate_input(x, relu_input, input_mask), weight, dilation, left, edges)
    return compiled_depthwise_conv(x, weight, input_mask, dilation, left, relu_input, edges)


def _check_input_gate(x: torch.Tensor, relu_input: bool, input_mask: torch.Tensor | None) -> None:
    if not isinstance(relu_input, bool):
        raise TypeError(f"relu_input must be a bool, got {type(relu_input).__name__}")
    if input_mask is None:
        return
    if not isinstance(input_mask, torch.Tensor) or input_mask.dtype != torch.bool:
        described = input_mask.dtype if isinstance(input_mask, torch.Tensor) else type(input_mask).__name__
        raise ValueError(f"input_mask must be a bool tensor of shape (B, T), got {described}")
    if input_mask.shape != x.shape[:2]:
        raise ValueError(
            f"input_mask must have shape (B, T) = {tuple(x.shape[:2])} (x's first two dims), "
            f"got shape {tuple(input_mask.shape)}"
        )
    if input_mask.device != x.device:
        raise ValueError(f"input_mask is on {input_mask.device} but x is on {x.device}; move them to the same device")


def _check_depthwise(x: torch.Tensor, weight: torch.Tensor, dilation: int, padding: str) -> tuple[int, int]:
    """Check the arguments after their ranks and dtypes; return the dilation to run, at most T (see
    `depthwise_conv`; the PyTorch path pads x by (K - 1) * dilation zeros), and ``left``, the steps
    before t that tap 0 reads."""
    channels, kernel_size = weight.shape
    if channels != x.shape[2]:
        raise ValueError(
            f"weight must have shape (C, K) with C={x.shape[2]} (the channels of x), got shape {tuple(weight.shape)}"
        )
    if not 1 <= kernel_size <= MAX_KERNEL_SIZE:
        raise ValueError(
            f"weight must have a kernel size K in [1, {MAX_KERNEL_SIZE}] in its last dim, got shape {tuple(weight.shape)}"
        )
    check_int("dilation", dilation, 1)
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    if padding == "centred" and kernel_size % 2 == 0:
        raise ValueError(
            f'padding="centred" needs an odd kernel size K (its taps are centred on t), got K={kernel_size}; '
            'use padding="causal" for an even K'
        )
    check_same_device_and_dtype("x", x, weight=weight)
    if not isinstance(x.shape[1], torch.SymInt):  # traced for any length (an export), the same sums uncapped
        dilation = min(dilation, max(x.shape[1], 1))
    return dilation, (kernel_size - 1 if padding == "causal" else kernel_size // 2) * dilation
