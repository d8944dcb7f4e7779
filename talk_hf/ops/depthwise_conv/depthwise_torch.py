"""The PyTorch path of :func:`talk_hf.ops.depthwise_conv` (its definition: the package docstring)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._precision import accumulation_dtype
from .._taps import shifted_sum
from ..documents import taps_inside_documents


def gate_input(x: torch.Tensor, relu: bool, mask: torch.Tensor | None) -> torch.Tensor:
    """The gated input u of :func:`depthwise_conv` in PyTorch: ``relu(x)`` (with ``relu``), times the
    (B, T) bool ``mask`` over the channels (when given)."""
    if relu:
        x = torch.relu(x)
    return x if mask is None else x * mask.unsqueeze(-1).to(x.dtype)


def depthwise_conv_torch(
    x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int, edges: torch.Tensor | None = None
) -> torch.Tensor:
    """PyTorch path of :func:`depthwise_conv`: a grouped ``conv1d`` over x padded with ``left`` zeros
    before and ``(K - 1) * dilation - left`` after; ``left`` as in the module docstring.  In a packed
    row (``edges``: (B, T, 2) document edges, `documents.DocumentEdges`) `_packed_tap_sum` instead."""
    if x.numel() == 0:  # conv1d rejects zero channels and inputs shorter than the kernel; the result is empty
        return x.clone()
    compute_dtype = accumulation_dtype(x.dtype)
    if edges is not None:
        return _packed_tap_sum(x.to(compute_dtype), weight.to(compute_dtype), dilation, left, edges).to(x.dtype)
    reach = (weight.shape[1] - 1) * dilation
    x_padded = F.pad(x.to(compute_dtype).transpose(1, 2), (left, reach - left))
    out = F.conv1d(x_padded, weight.to(compute_dtype).unsqueeze(1), dilation=dilation, groups=x.shape[2])
    return out.transpose(1, 2).to(x.dtype).contiguous()


def _packed_tap_sum(
    x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int, edges: torch.Tensor
) -> torch.Tensor:
    """out[b, t] = sum_k weight[:, k] * x[b, t + k * dilation - left] over the taps that read inside
    the document of t (`taps_inside_documents`): `shifted_sum` of x (B, T, C), weight (C, K)."""
    taps, length = weight.shape[1], x.shape[1]
    x_padded = F.pad(x, (0, 0, left, (taps - 1) * dilation - left))
    inside = taps_inside_documents(edges, taps, left, dilation).to(x.dtype)  # (B, T, K)
    return shifted_sum(x_padded, length, taps, lambda tap: inside[..., tap, None] * weight[:, tap], dilation)
