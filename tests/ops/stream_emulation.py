"""A Python transcription of the streaming CUDA kernels' per-thread loops
(csrc/talk_conv/talk_conv_cuda_stream.cu, csrc/dynamic_conv/dynamic_conv_cuda_stream.cu), statement
for statement in their indexing: the same chunks, prefix-ring slots and leads, slow paths, contributor ranges, staged-weight steps and tap order.  The CPU suite
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
CONV = kernel_constants("dynamic_conv/dynamic_conv_cuda_stream.cu")
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


def tap_reads_document(edges, b: int, t: int, tap: int, padding_l: int, length: int) -> bool:
    """Whether tap k of token (b, t) reads inside t's span (always where edges is None)."""
    if edges is None:
        return True
    first, last = span_of(edges, b, t, length)
    return first <= t + tap - padding_l <= last


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


# --- dynamic_conv_cuda_stream.cu ------------------------------------------------------------


def block_heads(heads: int, head_size: int, width: int) -> int:
    """conv_shape's bound on the heads one block's channels touch."""
    return min(heads, (CONV["kConvThreads"] * width - 1) // head_size + 2)


def conv(input, weight, padding_l, width, transpose, edges=None):
    """conv_stream_kernel: input (B, T, C), weight (B, T, H, K) float64 -> output (B, T, C)."""
    batch, length, channels = input.shape
    heads, taps = weight.shape[2], weight.shape[3]
    head_size = channels // heads
    threads, chunk, weight_rows = CONV["kConvThreads"], CONV["kConvChunk"], CONV["kWeightRows"]
    bound = block_heads(heads, head_size, width)
    halo = taps - 1 if transpose else 0
    lead = padding_l if transpose else taps - 1 - padding_l
    stage_width = bound * taps
    output = torch.full_like(input, float("nan"))
    for b in range(batch):
        for block_channel in range(0, channels, threads * width):
            first_head = block_channel // head_size
            for first in range(0, length, chunk):
                end = min(first + chunk, length)
                rings = {}  # channel -> (ring slots, newest slot)
                for channel in range(block_channel, min(block_channel + threads * width, channels), width):
                    slots = [None] * taps
                    for slot in range(taps - 1):
                        row = first + lead - (taps - 1) + slot
                        inside = 0 <= row < length
                        slots[slot] = (
                            input[b, row, channel : channel + width]
                            if inside
                            else torch.zeros(width, dtype=input.dtype)
                        )
                    rings[channel] = [slots, taps - 2]
                for tile in range(first, end, weight_rows):
                    rows = min(end - tile, weight_rows)
                    staged_first = tile + padding_l - halo if transpose else tile
                    staged = [None] * ((rows + halo) * stage_width)
                    for e in range(stage_width):
                        k, head = e % taps, first_head + e // taps
                        for step in range(rows + halo):
                            token = staged_first + step
                            reads = (
                                0 <= token < length
                                and head < heads
                                and tap_reads_document(edges, b, token, k, padding_l, length)
                            )
                            staged[step * stage_width + e] = float(weight[b, token, head, k]) if reads else 0.0
                    for channel, ring in rings.items():
                        slots, head = ring[0], channel // head_size
                        if head - first_head >= bound:
                            raise IndexError(f"head {head} outside the {bound} staged heads from {first_head}")
                        for t in range(tile, tile + rows):
                            ring[1] = 0 if ring[1] + 1 == taps else ring[1] + 1
                            row = t + lead
                            inside = 0 <= row < length
                            slots[ring[1]] = (
                                input[b, row, channel : channel + width]
                                if inside
                                else torch.zeros(width, dtype=input.dtype)
                            )
                            newest = ring[1]
                            if transpose:  # slots newest .. 0, then taps - 1 .. newest + 1
                                runs, weight_step = (
                                    [range(newest, -1, -1), range(taps - 1, newest, -1)],
                                    1 - stage_width,
                                )
                            else:  # slots newest + 1 .. taps - 1, then 0 .. newest
                                runs, weight_step = [range(newest + 1, taps), range(newest + 1)], 1
                            tap_weight = (t - tile + halo) * stage_width + (head - first_head) * taps
                            total = torch.zeros(width, dtype=input.dtype)
                            for slot in (slot for run in runs for slot in run):
                                total = total + read(staged, tap_weight) * read(slots, slot)
                                tap_weight += weight_step
                            output[b, t, channel : channel + width] = total
    return output


def conv_grad_weight(x, grad_out, heads, taps, padding_l, edges=None):
    """conv_stream_grad_weight_kernel: x, grad_out (B, T, C) float64 -> grad_weight (B, T, H, K)."""
    batch, length, channels = x.shape
    head_size = channels // heads
    rows_per_block, taps_per_thread = CONV["kGradRows"], CONV["kGradTapsPerThread"]
    tap_groups, channels_per_pass = CONV["kGradTapGroups"], CONV["kGradChannels"]
    block_taps = taps_per_thread * tap_groups
    x_rows_count = rows_per_block + block_taps - 1
    grad_weight = torch.full((batch, length, heads, taps), float("nan"), dtype=x.dtype)
    for b in range(batch):
        for first in range(0, length, rows_per_block):
            for head in range(heads):
                for first_tap in range(0, taps, block_taps):
                    x_first = first + first_tap - padding_l
                    sums = torch.zeros(rows_per_block, tap_groups, taps_per_thread, dtype=x.dtype)
                    for c0 in range(0, head_size, channels_per_pass):
                        width = min(head_size - c0, channels_per_pass)
                        columns = slice(head * head_size + c0, head * head_size + c0 + width)
                        grad_rows = [
                            grad_out[b, first + r, columns] if first + r < length else torch.zeros(width, dtype=x.dtype)
                            for r in range(rows_per_block)
                        ]
                        x_rows = [
                            x[b, x_first + r, columns]
                            if 0 <= x_first + r < length
                            else torch.zeros(width, dtype=x.dtype)
                            for r in range(x_rows_count)
                        ]
                        for step in range(rows_per_block):
                            for group in range(tap_groups):
                                for j in range(taps_per_thread):
                                    source = read(x_rows, step + group * taps_per_thread + j)
                                    sums[step, group, j] += (grad_rows[step] * source).sum()
                    for step in range(rows_per_block):
                        t = first + step
                        if t >= length:
                            continue
                        for group in range(tap_groups):
                            for j in range(taps_per_thread):
                                k = first_tap + group * taps_per_thread + j
                                if k < taps:
                                    reads = tap_reads_document(edges, b, t, k, padding_l, length)
                                    grad_weight[b, t, head, k] = sums[step, group, j] if reads else 0.0
    return grad_weight
