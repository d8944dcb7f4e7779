"""talk_conv's compiled kernels (csrc/talk_conv/), registered by `CompiledOp`:
``talk_hf::talk_conv(x (B,T,C), offset_left (B,T,H), offset_right (B,T,H) | None, max_left,
max_right, document_edges (B,T,2) int32 | None = None) -> (B,T,C)`` and
``talk_hf::talk_conv_backward``, the gradients for x and both offsets.  The document edges of a
packed row (`documents.DocumentEdges`) are taken by every kernel.

On CUDA the forward is the tiled kernel (csrc/talk_conv/talk_conv_cuda.cu) and the backward the
streaming kernels (talk_conv_cuda_stream.cu, which hand the shapes they do not take to the tiled
backward): the faster of each on an H200 (benchmarks/README.md).
"""

from __future__ import annotations

import torch

from .._compiled_op import CompiledOp, KernelEntries
from .talk_torch import talk_conv_torch

_KERNELS = KernelEntries(forward="talk_forward", backward="talk_backward")  # ops.h's names, in both extensions


def _forward(
    kernel,
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
    document_edges: torch.Tensor | None = None,
) -> torch.Tensor:
    return kernel(x, offset_left, offset_right, max_left, max_right, document_edges)


def _backward(kernel, grad_out, x, offset_left, offset_right, max_left, max_right, document_edges):
    """Gradients for x, offset_left, offset_right (an empty tensor in the causal form) and (none) the edges."""
    return *kernel(grad_out, x, offset_left, offset_right, max_left, max_right, document_edges), None


compiled_talk_conv = CompiledOp(
    "talk_conv",
    forward=_forward,
    backward=_backward,
    reference=talk_conv_torch,
    cpu=_KERNELS,
    cuda=_KERNELS,
)
