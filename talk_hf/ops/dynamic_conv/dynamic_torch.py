"""The PyTorch paths of :func:`talk_hf.ops.dynamic_conv` and :func:`talk_hf.ops.light_conv` (their
definitions: the package docstring).  In a packed row (``edges``, `documents.DocumentEdges`) the
taps that read outside their token's document get weight zero."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._precision import accumulation_dtype
from .._taps import shifted_sum
from ..documents import taps_inside_documents


def dynamic_conv_torch(
    x: torch.Tensor, weight: torch.Tensor, padding_l: int, edges: torch.Tensor | None = None
) -> torch.Tensor:
    """PyTorch reference of :func:`dynamic_conv`: K shifted multiply-adds (`shifted_sum`), memory O(B*T*C) (and the
    (B, T, H, K) weight masked by the (B, T, 2) document ``edges`` when given)."""
    batch, length, channels = x.shape
    heads, kernel_size = weight.shape[2], weight.shape[3]
    compute_dtype = accumulation_dtype(x.dtype)
    x_padded = F.pad(x.to(compute_dtype), (0, 0, padding_l, kernel_size - 1 - padding_l))
    x_padded = x_padded.view(batch, length + kernel_size - 1, heads, channels // heads)
    weight = weight.to(compute_dtype)
    if edges is not None:
        weight = weight * taps_inside_documents(edges, kernel_size, padding_l).unsqueeze(2)
    weight = weight.unsqueeze(-1)  # (B, T, H, K, 1)
    out = shifted_sum(x_padded, length, kernel_size, lambda tap: weight[:, :, :, tap])
    return out.view(batch, length, channels).to(x.dtype)


def light_conv_torch(
    x: torch.Tensor, weight: torch.Tensor, padding_l: int, edges: torch.Tensor | None = None
) -> torch.Tensor:
    """PyTorch reference of :func:`light_conv`: a grouped (depthwise) ``conv1d``; in a packed row
    (``edges`` given) `dynamic_conv_torch` of the (H, K) weight repeated for every token."""
    if x.numel() == 0:  # conv1d rejects inputs shorter than the kernel; the result is empty anyway
        return x.clone()
    if edges is not None:
        return dynamic_conv_torch(x, weight.expand(*x.shape[:2], *weight.shape), padding_l, edges)
    channels = x.shape[2]
    heads, kernel_size = weight.shape
    compute_dtype = accumulation_dtype(x.dtype)
    channel_weight = weight.to(compute_dtype).repeat_interleave(channels // heads, dim=0).unsqueeze(1)  # (C, 1, K)
    x_padded = F.pad(x.to(compute_dtype).transpose(1, 2), (padding_l, kernel_size - 1 - padding_l))
    out = F.conv1d(x_padded, channel_weight, groups=channels)  # (B, C, T)
    return out.transpose(1, 2).to(x.dtype).contiguous()
