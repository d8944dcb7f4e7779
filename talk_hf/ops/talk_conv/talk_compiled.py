"""talk_conv's compiled kernels (csrc/talk_conv/), registered by `CompiledOp`:
``talk_hf::talk_conv(x (B,T,C), offset_left (B,T,H), offset_right (B,T,H) | None, max_left,
max_right, document_edges (B,T,2) int32 | None = None) -> (B,T,C)`` and
``talk_hf::talk_conv_backward``, the gradients for x and both offsets.  The document edges of a
packed row (`documents.document_edges`) are taken by every kernel.

On CUDA the tiled kernels run, or the streaming ones where ``$TALK_HF_UNVERIFIED_CUDA`` names
talk_conv (they run the tiled kernels for shapes they do not take).  Packed calls run the streaming
kernels only: no GPU has run the tiled kernels' packed form yet (`_backend`).
"""

from __future__ import annotations

import torch

from .._compiled_op import CompiledOp, KernelEntries


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
    cpu=KernelEntries(forward="talk_forward", backward="talk_backward", document_edges=True),
    cuda=KernelEntries(forward="talk_forward", backward="talk_backward"),  # tiled: packed form not yet GPU-run
    unverified_cuda=KernelEntries(forward="talk_forward_stream", backward="talk_backward_stream", document_edges=True),
)
