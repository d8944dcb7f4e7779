"""The tap loop of the convolution ops' PyTorch paths, written once: `shifted_sum`.

A convolution of K taps over a padded input is K multiply-adds of the input shifted by one tap
each, ``out[t] = sum_k weight_k[t] * padded[t + k * dilation]``: memory O(B T C), no (B, T, K, C)
copy of the windows.  `talk_hf.ops.dynamic_conv`'s path weighs the shifts per token and head,
`talk_hf.ops.depthwise_conv`'s packed path per token and channel.  A decoding step needs the output of
its one new token only: `last_token_sum`, the causal cores' step form (DynamicConv's and LightConv's
kernels, TaLK's window as tap weights, `talk_hf.ops.talk_conv_step`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._precision import accumulation_dtype


def shifted_sum(
    padded: torch.Tensor,
    length: int,
    taps: int,
    tap_weight: Callable[[int], torch.Tensor],
    dilation: int = 1,
) -> torch.Tensor:
    """``sum_k tap_weight(k) * padded[:, k * dilation : k * dilation + length]`` over the taps k.

    Args:
        padded: (B, T + (K - 1) * dilation, ...) the input with its padding before and after.
        length: T, the outputs.
        taps: K >= 1.
        tap_weight: tap k -> its weight, broadcastable against (B, T, ...) (per token and head, per
            channel, or both).
        dilation: the spacing of the taps.

    Returns:
        (B, T, ...) in the promoted dtype of the input and the weights.
    """
    out = padded[:, :length] * tap_weight(0)
    for tap in range(1, taps):
        start = tap * dilation
        out = torch.addcmul(out, padded[:, start : start + length], tap_weight(tap))
    return out


def last_token_sum(context: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """The output of a causal convolution at the last of ``context``'s rows only: one decoding step.

    ``out = sum_k kernel[:, h, k] * context[:, k, channels of h]``, in O(K C) (running an op over the
    K rows would compute K outputs to keep one).

    Args:
        context: (B, K, C) the K inputs the last token's window covers, oldest first (the last row is
            the token's own input).
        kernel: (B, H, K) the token's per-head tap weights (H divides C), already normalised, or
            (1, H, K) the same weights for every row.

    Returns:
        (B, 1, C) of context's dtype, accumulated in float32 (float64 for float64 input).
    """
    batch, taps, channels = context.shape
    heads = kernel.shape[1]
    dtype = accumulation_dtype(context.dtype)
    per_head = context.to(dtype).view(batch, taps, heads, channels // heads)
    out = (per_head * kernel.to(dtype).transpose(1, 2).unsqueeze(-1)).sum(1)
    return out.reshape(batch, 1, channels).to(context.dtype)
