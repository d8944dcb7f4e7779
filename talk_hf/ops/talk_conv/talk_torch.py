"""The PyTorch path of :func:`talk_hf.ops.talk_conv` (its definition: the package docstring).

It never builds one global prefix sum (its differences cancel catastrophically in low precision at
long T).  It cuts time into blocks, gives each block a halo as wide as the farthest window reaches,
and takes a float32 (float64 for float64 input) prefix sum inside each block only.  Memory stays
O(B*T*C) and the result is exact to accumulation precision at any T.  In a packed row each edge is
clamped into its token's document instead of the row, token by token; the rest is unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._precision import accumulation_dtype

# Smallest time block of the blocked prefix sum; blocks grow to the halo width when windows are
# wider, so the halo never costs more than the block itself.
MIN_BLOCK = 256


def max_reach(name: str, offsets: torch.Tensor, max_offset: int, length: int) -> int:
    """Farthest a window reaches, in whole tokens: ceil(max(offsets) * max_offset), at most T - 1.

    Also rejects negative or non-finite offsets (one reduction, one host sync).
    """
    if max_offset == 0 or offsets.numel() == 0:
        return 0
    smallest, largest = torch.aminmax(offsets.detach())
    smallest, largest = float(smallest), float(largest)
    if not (math.isfinite(smallest) and math.isfinite(largest)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if smallest < 0:
        raise ValueError(f"{name} must be >= 0 (a relative reach), got a minimum of {smallest}")
    return min(math.ceil(largest * max_offset), length - 1)


def talk_conv_torch(
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
    edges: torch.Tensor | None = None,
) -> torch.Tensor:
    """The PyTorch reference of :func:`talk_conv` (arguments as there, already checked; ``edges``:
    None, or the (B, T, 2) document edges of a packed row, `documents.document_edges`).

    Shapes inside: nb blocks of L time steps, each widened by a halo of ``halo_left`` steps
    before and ``halo_right`` after, W = L + halo_left + halo_right; heads split C into H x R.
    """
    if x.numel() == 0:  # no tokens (or no channels): the empty result, still attached to x's graph
        return x.clone()
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    head_size = channels // heads
    compute_dtype = accumulation_dtype(x.dtype)
    normalizer = float(max_left + max_right + 1)

    # Window edges a = t - d and b = t + e per (batch, time, head), split into whole tokens and
    # fractions relative to t: the reaches d, e keep full precision whatever t is (t - d in float32
    # would keep only 7 fractional bits at T = 70,000).  A clamped edge has no fraction.  Edges are
    # clamped into [first, last]: the row, or each token's document, (B, T, 1) each.
    time = torch.arange(length, device=x.device).view(1, length, 1)
    first, last = (0, length - 1) if edges is None else (edges[..., :1], edges[..., 1:])
    reach_left = offset_left.to(compute_dtype) * max_left
    whole_left = reach_left.detach().ceil()
    left_inside = reach_left <= time - first
    left_floor = torch.where(left_inside, time - whole_left.long(), first)
    left_frac = torch.where(left_inside, whole_left - reach_left, 0.0)  # d frac / d reach = -1
    if offset_right is None:
        right_floor, right_frac = time.expand(batch, length, heads), torch.zeros_like(left_frac)
    else:
        reach_right = offset_right.to(compute_dtype) * max_right
        whole_right = reach_right.detach().floor()
        right_inside = reach_right <= last - time
        right_floor = torch.where(right_inside, time + whole_right.long(), last)
        right_frac = torch.where(right_inside, reach_right - whole_right, 0.0)

    # Halo: one step before the farthest left edge floor(a) (so that prefix[floor(a) - 1] exists)
    # and up to the farthest token after floor(b).
    halo_left = max_reach("offset_left", offset_left, max_left, length) + 1
    halo_right = (0 if offset_right is None else max_reach("offset_right", offset_right, max_right, length)) + 1
    block = min(length, max(MIN_BLOCK, halo_left + halo_right))
    num_blocks = -(-length // block)
    padded_length = num_blocks * block
    span = block + halo_left + halo_right

    # The constant normaliser 1/K is applied to x up front, folded into the padding copy.
    x_padded = F.pad(x.to(compute_dtype) / normalizer, (0, 0, halo_left, padded_length - length + halo_right))
    # (B, nb, span, C) overlapping view: block n covers padded steps n*L .. n*L + span - 1.
    x_blocks = x_padded.unfold(1, span, block).transpose(2, 3)
    prefix = x_blocks.cumsum(2)  # inclusive: prefix[i] = x_blocks[0] + ... + x_blocks[i]
    x_blocks = x_blocks.view(batch, num_blocks, span, heads, head_size)
    prefix = prefix.view(batch, num_blocks, span, heads, head_size)

    def extend_to_blocks(values: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, nb, L, H, 1); steps past T repeat the last real value (then dropped)."""
        tail = values[:, -1:].expand(batch, padded_length - length, heads)
        return torch.cat([values, tail], dim=1).view(batch, num_blocks, block, heads, 1)

    block_start = torch.arange(num_blocks, device=x.device).view(1, num_blocks, 1, 1, 1) * block
    expanded_shape = (batch, num_blocks, block, heads, head_size)

    def block_index(edge: torch.Tensor, shift: int = 0) -> torch.Tensor:
        """(B, T, H) global token index -> (B, nb, L, H, R) index into the block's span."""
        local = extend_to_blocks(edge) - block_start + (halo_left + shift)
        return local.expand(expanded_shape)

    left_index = block_index(left_floor)
    after_right_index = block_index(right_floor + 1)
    # P[i] (the sum of the tokens before i) is prefix[i - 1]; halo_left >= 1 keeps i - 1 >= 0.
    window_sum = prefix.gather(2, block_index(right_floor + 1, shift=-1)) - prefix.gather(
        2, block_index(left_floor, shift=-1)
    )
    out = torch.addcmul(window_sum, extend_to_blocks(right_frac), x_blocks.gather(2, after_right_index))
    out = torch.addcmul(out, extend_to_blocks(left_frac), x_blocks.gather(2, left_index), value=-1)
    out = out.view(batch, padded_length, channels)[:, :length]
    return out.to(x.dtype).contiguous()
