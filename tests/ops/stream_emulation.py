"""A Python transcription of talk_conv's streaming CUDA kernels' per-thread loops
(csrc/talk_conv/talk_conv_cuda_stream.cu; dynamic_conv's: conv_stream_emulation.py), statement for
statement in their indexing: the same chunks, prefix-ring slots and leads, slow paths and
contributor ranges.  The CPU suite
runs it against the reference, so the indexing is checked here although the kernels need a GPU
(which runs the kernels themselves).  One emulated thread is (batch row, vector of `width`
channels); its channels are a float64 tensor of `width` values.  Global and shared reads go through
`read`, which fails on an index outside the array (Python would wrap a negative one).

Packed rows: every function takes the (B, T, 2) document edges of `talk_hf.ops.documents.document_edges`
(``edges``; None: unpacked) and reads a token's span through `span_of`, as the kernels do through
talk_math.h's RowSpans / DocumentSpans.

The kernels' constants are read from their sources, so the emulation follows any retuning.  The slow
path of the forward's prefix ring is correct for any edge but meant for offsets above 1 only:
`STATISTICS["slow_path_rows"]` counts the prefix rows it answered, so a test can require none.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parents[2] / "csrc"


def kernel_constants(source: str) -> dict[str, int]:
    """The ``constexpr int kName = <int>;`` constants of a kernel source."""
    text = (CSRC / source).read_text()
    return {name: int(value) for name, value in re.findall(r"constexpr int (k\w+) = (\d+);", text)}


TALK = kernel_constants("talk_conv/talk_conv_cuda_stream.cu")
STATISTICS = {"slow_path_rows": 0}  # prefix rows PrefixRing.at answered from global memory


def read(array, index: int):
    """array[index], failing where the kernel would read outside the array."""
    if not 0 <= index < len(array):
        raise IndexError(f"read at {index} outside [0, {len(array)})")
    return array[index]


# --- talk_math.h --------------------------------------------------------------------------------


def span_of(edges, b: int, t: int, length: int) -> tuple[int, int]:
    """(first, last): the tokens token (b, t)'s window may cover: RowSpans' (0, T - 1) where edges is
    None, else DocumentSpans' edges[b, t]."""
    if edges is None:
        return 0, length - 1
    return int(edges[b, t, 0]), int(edges[b, t, 1])


def shifted_edge(t: int, shift: float, span: tuple[int, int]) -> tuple[int, float, bool]:
    """(index, frac, free) of the edge at t + shift clamped into the span (first, last)."""
    first, last = span
    if shift != shift:
        return first, 0.0, False
    limit = 2.0 * (last - first + 1)
    shift = -limit if shift < -limit else (limit if shift > limit else shift)
    whole = math.floor(shift)
    index, frac = t + int(whole), shift - whole
    if index < first:
        return first, 0.0, False
    if index > last or (index == last and frac > 0):
        return last, 0.0, False
    return index, frac, True


def talk_edges(offset_left, offset_right, b, t, head, span, max_left, max_right):
    """The left and right edges of token (b, t) of a head (offset_right None: causal), in its span."""
    left = shifted_edge(t, -(float(offset_left[b, t, head]) * max_left), span)
    if offset_right is None:
        return left, (t + 1, 0.0, False)
    index, frac, free = shifted_edge(t, float(offset_right[b, t, head]) * max_right, span)
    return left, (index + 1, frac, free)


def scatter_entries(left, right) -> list[tuple[int, float]]:
    return [(left[0], 1 - left[1]), (left[0] + 1, left[1]), (right[0], right[1] - 1), (right[0] + 1, -right[1])]


# --- talk_conv_cuda_stream.cu ---------------------------------------------------------------


class PrefixRing:
    """One forward thread's ring of prefix rows (PrefixRing in talk_conv_cuda_stream.cu)."""

    def __init__(self, column, rows: int, begin: int, width: int):
        self.column, self.rows, self.begin = column, rows, begin
        self.slots = [None] * rows
        self.newest_row, self.newest_slot = begin - 1, -1
        self.running = torch.zeros(width, dtype=torch.float64)

    def push(self, x_row):
        self.newest_row += 1
        self.newest_slot = 0 if self.newest_slot + 1 == self.rows else self.newest_slot + 1
        self.slots[self.newest_slot] = self.running.clone()
        self.running += x_row

    def read_slot(self, row):
        slot = self.newest_slot - (self.newest_row - row)
        if slot < 0:
            slot += self.rows
        return read(self.slots, slot).clone()

    def at(self, row):
        oldest = max(self.newest_row - self.rows + 1, self.begin)
        if oldest <= row <= self.newest_row:
            return self.read_slot(row)
        STATISTICS["slow_path_rows"] += 1
        length = len(self.column)
        if row > self.newest_row:
            value = self.running.clone()
            for j in range(self.newest_row + 1, min(row, length)):
                value += read(self.column, j)
            return value
        value = self.read_slot(oldest)
        for j in range(row, min(oldest, length)):
            value -= read(self.column, j)
        return value

    def integral(self, edge):
        value, after = self.at(edge[0]), self.at(edge[0] + 1)
        return value + edge[1] * (after - value)


def talk_forward(x, offset_left, offset_right, max_left, max_right, width, edges=None):
    """talk_stream_forward_kernel: x (B, T, C) float64 -> (B, T, C)."""
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    head_size = channels // heads
    out = torch.full_like(x, float("nan"))
    lead = max_right + TALK["kPrefixLead"]
    rows_in_ring = max_left + max_right + TALK["kPrefixLead"] + 1
    chunk, prefetch = TALK["kForwardChunk"], TALK["kPrefetchRows"]
    for b in range(batch):
        for channel in range(0, channels, width):
            head, column = channel // head_size, x[b, :, channel : channel + width]
            for first in range(0, length, chunk):
                end = min(first + chunk, length)
                last_row = end - 1 + lead
                ring = PrefixRing(column, rows_in_ring, max(first - max_left, 0), width)
                for group in range(ring.begin, last_row + 1, prefetch):
                    rows = [
                        read(column, row) if row < length and row <= last_row else torch.zeros(width, dtype=x.dtype)
                        for row in range(group, group + prefetch)
                    ]
                    for r in range(prefetch):
                        if group + r > last_row:
                            break
                        ring.push(rows[r])
                        t = group + r - lead
                        if t < first:
                            continue
                        span = span_of(edges, b, t, length)
                        left, right = talk_edges(offset_left, offset_right, b, t, head, span, max_left, max_right)
                        value = ring.integral(right) - ring.integral(left)
                        out[b, t, channel : channel + width] = value / (max_left + max_right + 1)
    return out


def talk_reach(offset_left, offset_right, max_left, max_right, edges=None) -> tuple[int, int]:
    """talk_stream_reach_kernel: (before, after), at least 0."""
    batch, length, heads = offset_left.shape
    before = after = 0
    for b in range(batch):
        for t in range(length):
            span = span_of(edges, b, t, length)
            for head in range(heads):
                left, right = talk_edges(offset_left, offset_right, b, t, head, span, max_left, max_right)
                before = max(before, t - min(left[0], right[0]))
                after = max(after, max(left[0], right[0]) + 1 - t)
    return before, after


def talk_grad_x(grad_out, offset_left, offset_right, max_left, max_right, width, edges=None):
    """talk_stream_grad_x_kernel: grad_out (B, T, C) float64 -> grad_x (B, T, C)."""
    batch, length, channels = grad_out.shape
    head_size = channels // offset_left.shape[2]
    before, after = talk_reach(offset_left, offset_right, max_left, max_right, edges)
    grad_x = torch.full_like(grad_out, float("nan"))
    chunk = TALK["kBackwardChunk"]
    for b in range(batch):
        for channel in range(0, channels, width):
            head, column = channel // head_size, grad_out[b, :, channel : channel + width]
            for first in range(0, length, chunk):
                end = min(first + chunk, length)
                difference = [torch.zeros(width, dtype=grad_out.dtype) for _ in range(end - first)]
                for t in range(max(first - after, 0), min(end - 1 + before, length - 1) + 1):
                    span = span_of(edges, b, t, length)
                    left, right = talk_edges(offset_left, offset_right, b, t, head, span, max_left, max_right)
                    grad = read(column, t)
                    for position, weight in scatter_entries(left, right):
                        if position >= end or weight == 0:
                            continue
                        row = max(position, first) - first
                        difference[row] = read(difference, row) + weight * grad
                running = torch.zeros(width, dtype=grad_out.dtype)
                for r in range(end - first):
                    running = running + difference[r]
                    grad_x[b, first + r, channel : channel + width] = running / (max_left + max_right + 1)
    return grad_x


def talk_offsets(x, grad_out, offset_left, offset_right, max_left, max_right, width, edges=None):
    """talk_stream_offsets_kernel: (grad_left, grad_right or None), each (B, T, H)."""
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    head_size = channels // heads
    grad_left = torch.full_like(offset_left, float("nan"))
    grad_right = None if offset_right is None else torch.full_like(offset_right, float("nan"))
    normalizer = max_left + max_right + 1
    rows = x.reshape(batch * length, channels)
    for b in range(batch):
        for t in range(length):
            span = span_of(edges, b, t, length)
            for head in range(heads):
                left, right = talk_edges(offset_left, offset_right, b, t, head, span, max_left, max_right)
                right_inside = grad_right is not None and right[0] < length
                dot_left = dot_right = 0.0
                for c in range(head * head_size, (head + 1) * head_size, width):
                    grad = grad_out[b, t, c : c + width]
                    dot_left += float((grad * read(rows, b * length + left[0])[c : c + width]).sum())
                    if right_inside:
                        dot_right += float((grad * read(rows, b * length + right[0])[c : c + width]).sum())
                grad_left[b, t, head] = (max_left / normalizer if left[2] else 0.0) * dot_left
                if grad_right is not None:
                    grad_right[b, t, head] = (max_right / normalizer if right[2] else 0.0) * dot_right
    return grad_left, grad_right
