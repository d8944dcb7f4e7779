"""dynamic_conv's and light_conv's compiled kernels (csrc/dynamic_conv/), registered by `CompiledOp`:
``talk_hf::dynamic_conv(x (B,T,C), weight (B,T,H,K), padding_l, document_edges (B,T,2) int32 | None
= None) -> (B,T,C)``, ``talk_hf::light_conv(x, weight (H,K), padding_l, document_edges)`` and their
backward ops, the gradients for x and the weight.  The document edges of a packed row
(`documents.DocumentEdges`) are taken by every kernel.

Both run the same kernels: LightConv's (H, K) kernel is passed as a per-token (B, T, H, K) view with
zero batch and time strides, and its gradient summed over batch and time.  On CUDA the streaming
kernels run (csrc/dynamic_conv/dynamic_conv_cuda_stream.cu; they hand the shapes they do not take to
the tiled kernels of dynamic_conv_cuda.cu).
"""

from __future__ import annotations

import torch

from .._compiled_op import CompiledOp, KernelEntries
from .dynamic_torch import dynamic_conv_torch, light_conv_torch

_KERNELS = KernelEntries(forward="conv_forward", backward="conv_backward")  # ops.h's names, in both extensions


def _per_token(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """LightConv's (H, K) kernel as a (B, T, H, K) view with zero batch and time strides."""
    return weight.expand(x.shape[0], x.shape[1], *weight.shape)


def _dynamic_forward(
    kernel, x: torch.Tensor, weight: torch.Tensor, padding_l: int, document_edges: torch.Tensor | None = None
) -> torch.Tensor:
    return kernel(x, weight, padding_l, document_edges)


def _dynamic_backward(kernel, grad_out, x, weight, padding_l, document_edges):
    """Gradients for x, the per-token weight (B, T, H, K) and (none) the edges."""
    return *kernel(grad_out, x, weight, padding_l, False, document_edges), None


def _light_forward(
    kernel, x: torch.Tensor, weight: torch.Tensor, padding_l: int, document_edges: torch.Tensor | None = None
) -> torch.Tensor:
    return kernel(x, _per_token(weight, x), padding_l, document_edges)


def _light_backward(kernel, grad_out, x, weight, padding_l, document_edges):
    """Gradients for x, the shared weight (H, K), summed over batch and time, and (none) the edges."""
    return *kernel(grad_out, x, _per_token(weight, x), padding_l, True, document_edges), None


compiled_dynamic_conv = CompiledOp(
    "dynamic_conv",
    forward=_dynamic_forward,
    backward=_dynamic_backward,
    reference=dynamic_conv_torch,
    cpu=_KERNELS,
    cuda=_KERNELS,
)
compiled_light_conv = CompiledOp(
    "light_conv",
    forward=_light_forward,
    backward=_light_backward,
    reference=light_conv_torch,
    cpu=_KERNELS,
    cuda=_KERNELS,
)
