"""The tap loop of the convolution ops' PyTorch paths, written once: `shifted_sum`.

A convolution of K taps over a padded input is K multiply-adds of the input shifted by one tap
each, ``out[t] = sum_k weight_k[t] * padded[t + k * dilation]``: memory O(B T C), no (B, T, K, C)
copy of the windows.  `talk_hf.ops.dynamic_conv`'s path weighs the shifts per token and head,
`talk_hf.ops.depthwise_conv`'s packed path per token and channel.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


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
