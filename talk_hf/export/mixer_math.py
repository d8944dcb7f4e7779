"""The mixer cores as formulas ONNX can express: a window sum with one kernel per token and head.

The compiled ops (``talk_hf::talk_conv``, ``talk_hf::dynamic_conv``, ...) cannot go into an ONNX graph,
and their PyTorch paths size their blocks from the offsets' values (a host read, no fixed graph).
Every core is, though, a sum over a bounded window of taps ``d`` around each token:

    out[t, channels of h] = sum_k kernel[t, h, k] * x[t + k - padding_l, channels of h]   (zeros outside [0, T))

DynamicConv and LightConv are that by definition (`DESIGN.md` section 3).  TaLK is that too: token
``t - d`` lies in the window ``[t - reach_left, t + 1)`` for the length ``clamp(reach_left + 1 - d, 0, 1)``
(whole tokens 1, the edge token ``1 - frac``, tokens past the edge 0), and likewise to the right, so
its kernel over ``max_left + max_right + 1`` taps is ``clamp(reach + 1 - |d|, 0, 1) / K``.  A window
clamped at the sequence's edges reads the zeros outside it, which weigh nothing: the same sum.

`sequence_core` runs an encoder core over a whole source (a loop over the taps: O(T C K), no
(T, K, C) copy); `step_core` runs a decoder core for one new token over its cached context.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers.dynamic_conv_mixer import DynamicConvCore, LightConvCore
from ..layers.talk_mixer import TaLKCore

SUPPORTED_CORES = (TaLKCore, DynamicConvCore, LightConvCore)


def talk_kernel(offsets: torch.Tensor, max_reach: int, towards_past: bool) -> torch.Tensor:
    """TaLK's tap weights on one side of each token, before the 1/K normaliser.

    Args:
        offsets: (..., H) relative reach (sigmoid outputs).
        max_reach: the layer's maximum reach on that side, in tokens.
        towards_past: order the taps oldest first (the left side) or nearest first (the right side).

    Returns:
        (..., H, max_reach) weights ``clamp(offset * max_reach + 1 - d, 0, 1)`` of the tokens ``d = 1 ..
        max_reach`` away, ordered as their tokens are in time.
    """
    distance = torch.arange(1, max_reach + 1, device=offsets.device, dtype=offsets.dtype)
    if towards_past:
        distance = distance.flip(0)
    return (offsets.unsqueeze(-1) * max_reach + 1 - distance).clamp(0, 1)


def talk_full_kernel(core: TaLKCore, offset_left: torch.Tensor, offset_right: torch.Tensor | None) -> torch.Tensor:
    """(..., H) left [and right] offsets -> (..., H, max_left + 1 + max_right) normalised taps, oldest first."""
    parts = [talk_kernel(offset_left, core.max_left, towards_past=True), torch.ones_like(offset_left).unsqueeze(-1)]
    if offset_right is not None:
        parts.append(talk_kernel(offset_right, core.max_right, towards_past=False))
    return torch.cat(parts, dim=-1) / (core.max_left + core.max_right + 1)


def tap_rows(padded: torch.Tensor, tap: int, taps: int, dilation: int) -> torch.Tensor:
    """(B, L, ...) -> (B, L - (taps - 1) * dilation, ...): row ``tap * dilation + t`` for every output t,
    the rows tap ``tap`` reads.  Sliced by offsets from both ends, so an exported graph keeps L dynamic."""
    from_end = (taps - 1 - tap) * dilation
    return padded[:, tap * dilation : -from_end if from_end else None]


def tap_sum(padded: torch.Tensor, kernel: torch.Tensor, dilation: int = 1) -> torch.Tensor:
    """The window sums of the tokens a padded input holds in full, tap by tap (no (T, K, C) copy).

    Args:
        padded: (B, T + (K - 1) * dilation, C): the tokens' taps and the padding around them.
        kernel: (B, T, H, K) or (1, 1, H, K) per-token (or shared) taps; head h owns channels h*C/H ...
            (h+1)*C/H - 1.
        dilation: the spacing of the taps (``out[t]`` reads ``padded[t + k * dilation]`` for the taps k).

    Returns:
        (B, T, C) float32 sums.
    """
    batch, _, channels = padded.shape
    heads, taps = kernel.shape[-2:]
    padded = padded.float().view(batch, padded.shape[1], heads, channels // heads)
    kernel = kernel.float().unsqueeze(-1)
    out = tap_rows(padded, 0, taps, dilation) * kernel[:, :, :, 0]
    for tap in range(1, taps):
        out = out + tap_rows(padded, tap, taps, dilation) * kernel[:, :, :, tap]
    return out.view(batch, out.shape[1], channels)


def window_sum(x: torch.Tensor, kernel: torch.Tensor, padding_l: int) -> torch.Tensor:
    """The dynamic-convolution sum of every token, tap by tap (`tap_sum` of ``x`` padded with zeros).

    Args:
        x: (B, T, C) input, zero at padding.
        kernel: (B, T, H, K) or (1, 1, H, K) per-token (or shared) taps; head h owns channels h*C/H ...
        padding_l: taps before the token (``out[t]`` reads ``x[t - padding_l .. t - padding_l + K - 1]``).

    Returns:
        (B, T, C) float32 sums, cast back to ``x``'s dtype.
    """
    taps = kernel.shape[-1]
    padded = F.pad(x.float(), (0, 0, padding_l, taps - 1 - padding_l))
    return tap_sum(padded, kernel).to(x.dtype)


def step_sum(context: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """One token's window sum over its causal context.

    Args:
        context: (B, N, C) the N - 1 cached mixer inputs, then the new token's.
        kernel: (B, H, N) the new token's taps, oldest first.

    Returns:
        (B, 1, C), summed in float32, in ``context``'s dtype.
    """
    batch, taps, channels = context.shape
    heads = kernel.shape[1]
    per_head = context.float().view(batch, taps, heads, channels // heads)
    out = (per_head * kernel.float().transpose(1, 2).unsqueeze(-1)).sum(1)
    return out.reshape(batch, 1, channels).to(context.dtype)


def talk_step(core: TaLKCore, u: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """A causal TaLK core's output for one new token, as ``talk_conv`` over the context computes it.

    Args:
        core: the decoder layer's `TaLKCore` (causal).
        u: (B, 1, C) the new token's mixer input.
        context: (B, max_left + 1, C) the cached mixer inputs, then ``u``.

    Returns:
        (B, 1, C).
    """
    offsets = torch.sigmoid(F.linear(u[:, 0], core.offset_proj.weight, core.offset_proj.bias))
    return step_sum(context, talk_full_kernel(core, offsets, None))


def check_supported_core(core, where: str) -> None:
    """Raise a ValueError naming ``where`` when ``core`` is not a core this module can express."""
    if not isinstance(core, SUPPORTED_CORES):
        names = ", ".join(cls.__name__ for cls in SUPPORTED_CORES)
        raise ValueError(f"{where} has a {type(core).__name__} mixer core; the ONNX export supports {names}")


def sequence_core(core, u: torch.Tensor) -> torch.Tensor:
    """An encoder (bidirectional) core over a whole sequence: (B, T, C) zeroed input -> (B, T, C)."""
    if isinstance(core, TaLKCore):
        offsets = torch.sigmoid(F.linear(u, core.offset_proj.weight, core.offset_proj.bias))
        if core.causal:
            offset_left, offset_right = offsets, None
        else:
            offset_left, offset_right = offsets.split(core.heads, dim=-1)
            offset_right = offset_right if core.max_right > 0 else None
        return window_sum(u, talk_full_kernel(core, offset_left, offset_right), core.max_left)
    if isinstance(core, DynamicConvCore):
        logits = F.linear(u, core.weight_proj.weight).view(*u.shape[:2], core.heads, core.kernel_size)
        return window_sum(u, core.normalize(logits), core.padding_l)
    return window_sum(u, core.normalize(core.weight)[None, None], core.padding_l)


def step_core(core, u: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    """A decoder (causal) core for one new token: u (B, 1, C), context (B, history_size + 1, C) -> (B, 1, C)."""
    if isinstance(core, TaLKCore):
        return talk_step(core, u, context)
    if isinstance(core, DynamicConvCore):
        logits = F.linear(u[:, 0], core.weight_proj.weight).view(u.shape[0], core.heads, core.kernel_size)
        return step_sum(context, core.normalize(logits))
    kernel = core.normalize(core.weight).to(u.dtype)
    return step_sum(context, kernel.expand(u.shape[0], -1, -1))
