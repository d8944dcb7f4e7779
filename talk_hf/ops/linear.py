"""``linear``: ``F.linear`` with a faster path for the few input rows of a decoding step on the CPU.

A batch-1 decoding step multiplies one row by every weight matrix of the model, so its time is
the time to stream the weights from memory.  MKL's one-row product, which ``F.linear`` runs,
streams an (out, 512) float32 weight at about half the speed of a plain sequential read on the
CPU we measured (``benchmarks/bench_linear.py``); the C++ kernel ``few_rows_linear``
(``csrc/cpu_linear.cpp``) reads each weight row once, in memory order, and dots it with every
input row.  It sums in a different order than MKL, so results agree to rounding, not bit for bit.

The kernel runs when every one of these holds, and ``F.linear`` otherwise: CPU tensors of one
floating dtype; at most `MAX_ROWS` input rows; a contiguous (out, in) weight; the ``"auto"`` or
``"cpu"`` backend (``$TALK_HF_BACKEND``) with the CPU extension loaded; no autocast; and nothing
needing autograd or tracing (`_compiled.needs_custom_op`): generation, not training.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import _compiled, _extension
from ._backend import requested_backend, resolve_backend

# The most input rows (the product of the leading dimensions) the kernel takes.  Above it MKL's
# matrix-matrix product reuses each loaded weight across rows better (benchmarks/bench_linear.py).
MAX_ROWS = 16


def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``input @ weight.T + bias``, as ``torch.nn.functional.linear``.

    Args:
        input: (..., in) tensor.
        weight: (out, in).
        bias: (out,) or None.

    Returns:
        (..., out) tensor of input's dtype.
    """
    if not _takes_kernel(input, weight, bias):
        return F.linear(input, weight, bias)
    rows = input.reshape(-1, input.shape[-1])
    out = _extension.load("cpu").few_rows_linear(rows, weight, bias)
    return out.view(*input.shape[:-1], weight.shape[0])


def _takes_kernel(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether ``linear(input, weight, bias)`` runs the C++ few-row kernel (see the module docstring)."""
    if input.device.type != "cpu" or weight.device.type != "cpu" or not input.dtype.is_floating_point:
        return False
    if weight.dtype != input.dtype or (bias is not None and (bias.dtype != input.dtype or bias.dim() != 1)):
        return False
    if weight.dim() != 2 or not weight.is_contiguous() or input.dim() == 0 or input.shape[-1] != weight.shape[1]:
        return False
    if weight.shape[1] == 0 or not 0 < input.numel() <= MAX_ROWS * weight.shape[1]:
        return False
    if torch.is_autocast_enabled("cpu") or _compiled.needs_custom_op(input, weight, bias):
        return False
    backend = requested_backend(None)
    return backend in ("auto", "cpu") and resolve_backend(backend, input.device) == "cpu"
