"""``linear``: ``F.linear`` with a faster path for the few input rows of a decoding step on the CPU.

A batch-1 decoding step multiplies one row by every weight matrix of the model, so its time is
the time to stream the weights from memory.  MKL's one-row product, which ``F.linear`` runs,
streams most (out, 512) float32 weights well below the speed of a plain sequential read
(``benchmarks/bench_linear.py``, per CPU family); the C++ kernel ``few_rows_linear``
(``csrc/linear/linear_cpu.cpp``) reads each weight row once, in memory order, eight rows side by side
(several load streams in flight), and dots them with every input row.  It sums in a different order
than MKL, so results agree to rounding, not bit for bit.

The kernel runs when every one of these holds, and ``F.linear`` otherwise: CPU tensors of one
floating dtype; at most `MAX_ROWS` input rows; a contiguous (out, in) weight; the ``"auto"`` or
``"cpu"`` backend (``$TALK_HF_BACKEND``) with the CPU extension loaded; no autocast; no ``torch.func``
transform nor forward-mode AD (`_compiled_op.under_transform`: the kernel cannot read the first's
tensors and would drop the second's tangents); and nothing needing autograd or tracing
(`_compiled_op.needs_autograd`, `_compiled_op.needs_custom_op`): generation, not training.  The checks cost a few microseconds, which a decoding step pays once per linear layer.

While ``torch.compile`` traces such a call (a compiled decoding step), it becomes one opaque node,
the custom op ``talk_hf::linear``, which makes the same choice when the compiled step runs: inductor
would otherwise lower it to MKL's product, the slower one for a few rows.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F

from . import _compiled_op, _extension
from ._backend import auto_extension, requested_backend, resolve_backend

# The most input rows (the product of the leading dimensions) the kernel takes.  Above it MKL's
# matrix-matrix product reuses each loaded weight across rows better (benchmarks/bench_linear.py).
MAX_ROWS = 8


def linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``input @ weight.T + bias``, as ``torch.nn.functional.linear``.

    Args:
        input: (..., in) tensor.
        weight: (out, in).
        bias: (out,) or None.

    Returns:
        (..., out) tensor of input's dtype.
    """
    if torch.compiler.is_compiling():
        if _traced_as_custom_op(input, weight, bias):
            return _linear_op(input, weight, bias)
        return F.linear(input, weight, bias)
    kernels = _kernels_for(input, weight, bias)
    if kernels is None:
        return F.linear(input, weight, bias)
    return kernels.few_rows_linear(input, weight, bias)


@torch.library.custom_op(f"{_compiled_op.OP_NAMESPACE}::linear", mutates_args=())
def _linear_op(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`linear` as one graph node of a compiled inference step: the kernel or ``F.linear``, chosen
    when it runs (the number of rows may be symbolic while tracing)."""
    return linear(input, weight, bias)


@_linear_op.register_fake
def _(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return input.new_empty(*input.shape[:-1], weight.shape[0])


def _traced_as_custom_op(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether a traced call becomes ``talk_hf::linear``: a CPU inference call that the kernel may
    take when it runs (the custom op has no autograd: a training step traces ``F.linear``)."""
    return (
        input.is_cpu
        and weight.is_cpu
        and input.dtype.is_floating_point
        and weight.dtype == input.dtype
        and weight.dim() == 2
        and type(weight) in _compiled_op._PLAIN  # a tensor subclass (torchao int8) traces F.linear
        and not torch.is_autocast_enabled("cpu")
        and not _compiled_op.needs_autograd(input, weight, bias)
        and resolve_backend(None, input.device) == "cpu"  # traced once: the extension loads
    )


def _kernels_for(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> ModuleType | None:
    """The CPU extension when ``linear(input, weight, bias)`` runs its kernel (see the module
    docstring), else None."""
    dtype = input.dtype
    if (
        not input.is_cpu
        or not weight.is_cpu
        or not dtype.is_floating_point
        or weight.dtype != dtype
        or weight.dim() != 2
        or not weight.is_contiguous()
    ):
        return None
    if bias is not None and (not bias.is_cpu or bias.dtype != dtype or bias.shape != weight.shape[:1]):
        return None
    in_features = weight.shape[1]
    if input.dim() == 0 or input.shape[-1] != in_features or not 0 < input.numel() <= MAX_ROWS * in_features:
        return None
    if (
        torch.is_autocast_enabled("cpu")
        or _compiled_op.under_transform()
        or _compiled_op.needs_custom_op(input, weight, bias)
        or _compiled_op.needs_autograd(input, weight, bias)
    ):
        return None
    backend = requested_backend(None)  # "torch", or a CUDA-only choice, leaves CPU layers to F.linear
    if backend == "auto":
        return auto_extension("cpu")
    return _extension.load("cpu") if backend == "cpu" else None
