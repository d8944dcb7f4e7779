"""A Python transcription of depthwise_conv's CUDA kernels (csrc/depthwise_conv/depthwise_conv_cuda.cu),
in the manner of stream_emulation.py: the same tiles of steps, tap ranges and span tests, statement
for statement in their indexing, so the CPU suite checks that indexing against the reference.

One emulated thread is a channel; its channels run together as one float64 (C,) tensor, since every
channel of a step takes the same taps.  The input gate (ReLU and mask) is left out: it touches no
index.  ``edges``: a packed row's (B, T, 2) document edges, or None (unpacked), read through
`stream_emulation.span_of` as the kernels read talk_math.h's RowSpans / DocumentSpans.
"""

from __future__ import annotations

import torch

from .stream_emulation import kernel_constants, read, span_of

DEPTHWISE = kernel_constants("depthwise_conv/depthwise_conv_cuda.cu")


def ceil_div(a: int, b: int) -> int:
    """talk_math.h's ceil_div for a > 0 (where the kernels call it)."""
    return (a + b - 1) // b


def correlate(input, weight, dilation: int, left: int, reversed: bool, edges=None):
    """correlate_kernel: out[b, t] = sum_k w_k * input[b, t + k * dilation - left] over the taps of t
    that read inside its span; w_k = weight[:, K - 1 - k] with ``reversed``, else weight[:, k].
    input (B, T, C), weight (C, K) float64 -> (B, T, C)."""
    batch, length, channels = input.shape
    taps, tile = weight.shape[1], DEPTHWISE["kTile"]
    out = torch.full_like(input, float("nan"))
    for b in range(batch):
        for first in range(0, length, tile):
            for t in range(first, min(first + tile, length)):
                span_first, span_last = span_of(edges, b, t, length)
                before, inside = span_first + left - t, span_last + 1 + left - t
                tap_first = 0 if before <= 0 else ceil_div(before, dilation)
                tap_end = min(ceil_div(inside, dilation), taps)
                total = torch.zeros(channels, dtype=input.dtype)
                for k in range(tap_first, tap_end):
                    tap = weight[:, taps - 1 - k] if reversed else weight[:, k]
                    total = total + tap * read(input[b], t + k * dilation - left)
                out[b, t] = total
    return out


def weight_gradient(grad, x, taps: int, dilation: int, left: int, edges=None):
    """weight_gradient_kernel's partial sums, one per (batch row, tile of steps), then their sum
    (the host's at::sum): (C, K)."""
    batch, length, channels = x.shape
    tile = DEPTHWISE["kWeightTile"]
    partials = []
    for b in range(batch):
        for first in range(0, length, tile):
            end = min(first + tile, length)
            partial = torch.zeros(taps, channels, dtype=x.dtype)
            for k in range(taps):
                shift = k * dilation - left  # tap k of step t reads t + shift
                for t in range(max(first, -shift), min(end, length - shift)):
                    if edges is not None:
                        span_first, span_last = span_of(edges, b, t, length)
                        if t + shift < span_first or t + shift > span_last:
                            continue
                    partial[k] += grad[b, t] * read(x[b], t + shift)
            partials.append(partial)
    return torch.stack(partials).sum(0).t()


def backward(grad_out, x, weight, dilation: int, left: int, edges=None):
    """depthwise_backward: (grad_x, grad_weight); grad_x is the correlation of grad_out with the taps
    reversed, reading (K - 1) * dilation - left steps back."""
    taps = weight.shape[1]
    grad_x = correlate(grad_out, weight, dilation, (taps - 1) * dilation - left, True, edges)
    return grad_x, weight_gradient(grad_out, x, taps, dilation, left, edges)
