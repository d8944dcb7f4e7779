"""A Python transcription of dynamic_conv's and light_conv's streaming CUDA kernels' per-thread loops
(csrc/dynamic_conv/dynamic_conv_cuda_stream.cu), in the manner of stream_emulation.py (whose
`read` and `span_of` it shares): the same chunks, staged-weight steps, head bounds and tap order,
statement for statement in their indexing.  Packed rows: ``edges`` as there (None: unpacked).
"""

from __future__ import annotations

import torch

from .stream_emulation import kernel_constants, read, span_of

CONV = kernel_constants("dynamic_conv/dynamic_conv_cuda_stream.cu")


def tap_reads_document(edges, b: int, t: int, tap: int, padding_l: int, length: int) -> bool:
    """Whether tap k of token (b, t) reads inside t's span (always where edges is None)."""
    if edges is None:
        return True
    first, last = span_of(edges, b, t, length)
    return first <= t + tap - padding_l <= last


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
