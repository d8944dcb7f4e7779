"""The PyTorch path of :func:`talk_hf.ops.talk_conv` (its definition: the package docstring).

It never builds one global prefix sum (its differences cancel catastrophically in low precision at
long T).  It cuts time into blocks of a fixed length L, takes a float32 (float64 for float64 input)
prefix sum inside each block, and sums a window from at most three pieces: the prefix sums at its
two edges, the total of the block its left edge lies in when the window crosses into the next one,
and, only for a window longer than a block (an offset far above 1), the blocks in between, as a
difference of their running totals.  Each piece is read as whole rows of a head's channels
(`rows_at`: one gather of B * T * H rows), and a window without a block piece reads a zero row, so
nothing is selected per channel.  Block lengths and indices depend on the shapes alone, so the path
traces into one graph (``torch.compile(fullgraph=True)``) and reads nothing back to the host but its
offsets' check.  Traced for a symbolic T (an export's dynamic length) the blocks are twice the
longest window and the general form, which holds for any number of blocks, is traced.  Memory stays
O(B*T*C).  In a packed row each edge is clamped into its token's document instead of the row, token
by token; the rest is unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .._precision import accumulation_dtype
from .._validation import runs_value_checks

# Smallest time block of the blocked prefix sum; blocks grow to twice the longest window, so that a
# window, even with offsets up to 2 (dropout), spans at most two blocks.
MIN_BLOCK = 256


def largest_reach(name: str, offsets: torch.Tensor, max_offset: int) -> int | None:
    """The farthest a window reaches on this side, ceil(max(offsets) * max_offset) whole tokens, after
    rejecting negative or non-finite offsets (one reduction, one host sync); None where nothing is
    read back (tracing, capturing, a ``torch.func`` transform: `runs_value_checks`)."""
    if offsets.numel() == 0:
        return 0
    if not runs_value_checks(offsets):
        return None
    smallest, largest = (float(value) for value in torch.aminmax(offsets.detach()))
    if not (math.isfinite(smallest) and math.isfinite(largest)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if smallest < 0:
        raise ValueError(f"{name} must be >= 0 (a relative reach), got a minimum of {smallest}")
    return math.ceil(largest * max_offset)


def block_length(length: int | torch.SymInt, max_left: int, max_right: int) -> int:
    """L: twice the longest window (at least MIN_BLOCK), and no longer than the T + 2 rows used; for a
    symbolic T (an export traces the path for every length) twice the longest window, a constant."""
    longest = 2 * (max_left + max_right + 1)
    if isinstance(length, torch.SymInt):
        return longest
    return min(max(MIN_BLOCK, longest), length + 2)


def rows_at(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values (B, rows, C) at the (B, T, H) row indices, head h reading its own R = C / H channels of
    its row -> (B, T, H, R).  One gather of whole R-channel rows (values seen as B * rows * H rows of
    R), not one index per channel."""
    batch, rows, channels = values.shape
    heads = index.shape[2]
    first_row_of_batch = (torch.arange(batch, device=index.device) * (rows * heads)).view(batch, 1, 1)
    flat_index = index * heads + first_row_of_batch + torch.arange(heads, device=index.device)
    picked = values.reshape(-1, channels // heads).index_select(0, flat_index.reshape(-1))
    return picked.view(*index.shape, channels // heads)


def talk_conv_torch(
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
    edges: torch.Tensor | None = None,
) -> torch.Tensor:
    """The PyTorch reference of :func:`talk_conv` (arguments as there, already checked; ``edges``:
    None, or the (B, T, 2) document edges of a packed row, `documents.DocumentEdges`).

    Shapes inside: the input padded to Tp = nb * L rows (one zero row before it, zeros after), seen as
    nb blocks of L rows; heads split C into H x R.
    """
    reaches = [largest_reach("offset_left", offset_left, max_left)]
    if offset_right is not None:
        reaches.append(largest_reach("offset_right", offset_right, max_right))
    if x.numel() == 0:  # no tokens (or no channels): the empty result, still attached to x's graph
        return x.clone()
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    compute_dtype = accumulation_dtype(x.dtype)
    normalizer = float(max_left + max_right + 1)

    # Window [l + left_frac, r + 1 + right_frac) per (batch, time, head): l and r whole tokens, the
    # fractions relative to t (the reaches d, e keep full precision whatever t is: t - d in float32
    # would keep only 7 fractional bits at T = 70,000).  A clamped edge has no fraction.  Edges are
    # clamped into [first, last]: the row, or each token's document, (B, T, 1) each; the final clamps
    # only matter for offsets the check rejects (while tracing, when it does not run).
    time = torch.arange(length, device=x.device).view(1, length, 1)
    first, last = (0, length - 1) if edges is None else (edges[..., :1].long(), edges[..., 1:].long())
    reach_left = offset_left.to(compute_dtype) * max_left
    whole_left = reach_left.detach().ceil()
    left_inside = reach_left <= time - first
    left = torch.where(left_inside, time - whole_left.long(), first).clamp(first, last)
    left_frac = torch.where(left_inside, whole_left - reach_left, 0.0)  # d frac / d reach = -1
    if offset_right is None:
        right, right_frac = time.expand(batch, length, heads), torch.zeros_like(left_frac)
    else:
        reach_right = offset_right.to(compute_dtype) * max_right
        whole_right = reach_right.detach().floor()
        right_inside = reach_right <= last - time
        right = torch.where(right_inside, time + whole_right.long(), last).clamp(first, last)
        right_frac = torch.where(right_inside, reach_right - whole_right, 0.0)

    # Row g of the padded input holds x[g - 1] / K (row 0 and rows past T are zeros), so the prefix
    # sum P[i] = x[0] + ... + x[i - 1] (over K) is the inclusive running sum up to row i, which the
    # blocks keep as within[i] (from their own first row) plus the totals of the blocks before i's.
    # Rows up to T + 1 are read (x[r + 1] with r = T - 1).
    block = block_length(length, max_left, max_right)
    num_blocks = -(-(length + 2) // block)
    if isinstance(length, torch.SymInt):
        # Traced for every T (an export): one block more, a count the tracer knows to exceed 1, so
        # that it does not specialise the graph to one block.
        num_blocks = (length + 1 + 2 * block) // block
    padded_length = num_blocks * block
    x_padded = F.pad(x.to(compute_dtype) / normalizer, (0, 0, 1, padded_length - length - 1))
    within_blocks = x_padded.view(batch, num_blocks, block, channels).cumsum(2)
    within = within_blocks.view(batch, padded_length, channels)

    # P[r + 1] - P[l] = within[r + 1] - within[l] in one block; a window that crosses into the next
    # block adds the total of l's block.  Each block term is read from a table whose row 0 is zeros,
    # the row a window without that term reads, so that nothing is selected per channel.
    after_right = right + 1
    window_sum = rows_at(within, after_right) - rows_at(within, left)
    if not (isinstance(num_blocks, int) and num_blocks == 1):
        block_totals = within_blocks[:, :, -1]  # (B, nb, C)
        left_block = left.div(block, rounding_mode="floor")
        right_block = after_right.div(block, rounding_mode="floor")
        zero_then_totals = F.pad(block_totals, (0, 0, 1, 0))  # (B, nb + 1, C), row k + 1: block k's total
        crosses = right_block > left_block
        window_sum = window_sum + rows_at(zero_then_totals, torch.where(crosses, left_block + 1, 0))
        if None in reaches or sum(reaches) + 1 > block:  # a window may span three blocks or more
            # the blocks strictly between l's and r + 1's: a difference of running totals (whose
            # cancellation only such long windows pay); row k of the table: the blocks before k
            totals_before = F.pad(block_totals.cumsum(1), (0, 0, 1, 0))  # (B, nb + 1, C)
            spans = right_block > left_block + 1
            after_between = rows_at(totals_before, torch.where(spans, right_block, 0))
            before_between = rows_at(totals_before, torch.where(spans, left_block + 1, 0))
            window_sum = window_sum + (after_between - before_between)
    # The fractional edge tokens: x[r + 1] (row r + 2) and x[l] (row l + 1).
    out = torch.addcmul(window_sum, right_frac.unsqueeze(-1), rows_at(x_padded, after_right + 1))
    out = torch.addcmul(out, left_frac.unsqueeze(-1), rows_at(x_padded, left + 1), value=-1)
    return out.view(batch, length, channels).to(x.dtype)
