"""The one-position decoding step of a SliceNet convolution (`SliceConv` with a cached history).

A decoding step convolves one new position from its history_size + 1 (gated) inputs, (B, history_size
+ 1, C_in), which the generation cache hands over.  ``conv1d`` and the sequence kernels cost far more
per call than that arithmetic on the CPU, so the step is a few products over the taps, with the
weights in the layouts of `StepWeights`:

* a depthwise k-tap convolution (s <= 0): `depthwise_taps`, the taps times the (k, C_in) kernel
  summed over the taps, in float32 at least;
* a regular or grouped one (s >= 1): `channel_map` of the taps as one channel-major (B, C_in * k) row;
* the 1x1 convolution after it: `channel_map` of its output.

The weights of a step are views of the parameters and, for the depthwise kernel, a small tap-major
copy; `SliceConv` derives them at every step, or once per ``generate()`` call (`keeping_step_weights`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import nn

from ..ops.grouped_linear import grouped_linear
from ..ops.linear import linear

# The most taps (B * k * C_in elements) that `depthwise_taps` multiplies in one product: 256 KB of
# float32, within a core's L2 cache.
TAP_PRODUCT_ELEMENTS = 1 << 16


class StepWeights(NamedTuple):
    """A `SliceConv`'s weights in the layouts of a decoding step.

    dtype: what the depthwise products accumulate in (float32 for bf16/fp16 inputs, float64 for float64).
    spatial: the k-tap convolution: depthwise (s <= 0), the (k, C_in) kernel, tap-major, contiguous,
        in ``dtype``; else a `matrix_of` the (C_spatial, C_in / groups, k) weight.
    pointwise: a `matrix_of` the 1x1 convolution's weight, or None (s == 1).
    """

    dtype: torch.dtype
    spatial: torch.Tensor
    pointwise: torch.Tensor | None


def matrix_of(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """A ``conv1d`` weight (C_out, C_in / groups, k) as the matrix `channel_map` applies to channel-major
    taps: (C_out, C_in * k) for one group, else (groups, C_out / groups, C_in / groups * k).  A view."""
    matrix = weight.flatten(1)
    return matrix if groups == 1 else matrix.unflatten(0, (groups, -1))


def channel_map(x: torch.Tensor, matrix: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., C_in) through a `matrix_of` matrix: (..., C_out), with ``bias`` (C_out,) for one group.

    One group runs `talk_hf.ops.linear` (the few-row kernel for decoding steps on the CPU), several
    `talk_hf.ops.grouped_linear.grouped_linear` (which takes no bias)."""
    if matrix.dim() == 2:
        return linear(x, matrix, bias)
    if bias is not None:
        raise ValueError("a grouped channel map takes no bias")
    return grouped_linear(x, matrix)


def depthwise_taps(taps: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """sum_j kernel[j] * taps[:, j]: (B, k, C) taps, oldest first, and a (k, C) kernel -> (B, 1, C) in
    the promoted dtype of the two (a float32 kernel accumulates bf16/fp16 taps in float32).

    Up to `TAP_PRODUCT_ELEMENTS` elements of taps, one product and one sum over (B, k, C); above, tap
    by tap into one (B, 1, C) sum, so that beam search's batches allocate no (B, k, C) product per step
    (a fresh buffer of megabytes, whose page faults cost more than the arithmetic).  Either is
    vectorised over the channels (an ``einsum`` over the channels would run a batched product of C
    tiny matrices).
    """
    elements = taps.numel()
    if isinstance(elements, torch.SymInt) or elements <= TAP_PRODUCT_ELEMENTS:  # traced for any batch: one product
        return (taps * kernel).sum(1, keepdim=True)
    taps, rows = taps.unbind(1), kernel.unbind(0)  # (B, C) and (C,) views, one call each
    out = taps[0] * rows[0]
    for tap, row in zip(taps[1:], rows[1:], strict=True):
        out.addcmul_(tap, row)
    return out.unsqueeze(1)


def channel_major(taps: torch.Tensor) -> torch.Tensor:
    """(B, k, C_in) taps -> (B, C_in * k), the taps of each channel together (a `matrix_of` row's order)."""
    return taps.transpose(1, 2).flatten(1)


@contextmanager
def keeping_step_weights(module: nn.Module) -> Iterator[None]:
    """Within the block, every `SliceConv` in ``module`` (each module with ``keeps_step_weights``)
    derives its `StepWeights` at its first decoding step and keeps them; leaving the block drops them.

    For ``generate()``, during which no weight changes: a step then dispatches no view of its weights
    and copies no depthwise kernel.  Not for training, nor around weight updates or loads.
    """
    convs = [conv for conv in module.modules() if hasattr(conv, "keeps_step_weights")]
    for conv in convs:
        conv.keeps_step_weights = True
    try:
        yield
    finally:
        for conv in convs:
            conv.keeps_step_weights = False
            conv.kept_step_weights = None
