"""depthwise_conv's compiled kernels (csrc/depthwise_conv/), registered by `CompiledOp`:
``talk_hf::depthwise_conv(x (B,T,C), weight (C,K), input_mask (B,T) bool | None, dilation, left,
relu, document_edges (B,T,2) int32 | None = None) -> (B,T,C)``, the input gated by the ReLU and the
mask inside the kernel, the taps stopped at the documents' edges in a packed row
(`documents.DocumentEdges`), and
``talk_hf::depthwise_conv_backward``, the gradients for x (through the gate) and the weight (C, K),
summed over batch and time.
"""

from __future__ import annotations

import torch

from .._compiled_op import CompiledOp, KernelEntries
from .depthwise_torch import depthwise_conv_torch, gate_input


def _forward(
    kernel,
    x: torch.Tensor,
    weight: torch.Tensor,
    input_mask: torch.Tensor | None,
    dilation: int,
    left: int,
    relu: bool,
    document_edges: torch.Tensor | None = None,
) -> torch.Tensor:
    return kernel(x, weight, dilation, left, input_mask, relu, document_edges)


def _backward(kernel, grad_out, x, weight, input_mask, dilation, left, relu, document_edges):
    """Gradients for x, the weight and (none) the mask and the edges."""
    grad_x, grad_weight = kernel(grad_out, x, weight, dilation, left, input_mask, relu, document_edges)
    return grad_x, grad_weight, None, None


def _reference(x, weight, input_mask, dilation, left, relu, document_edges=None):
    """The PyTorch path, taking the compiled op's inputs: the gated input's `depthwise_conv_torch`."""
    return depthwise_conv_torch(gate_input(x, relu, input_mask), weight, dilation, left, document_edges)


_KERNELS = KernelEntries(forward="depthwise_forward", backward="depthwise_backward")
compiled_depthwise_conv = CompiledOp(
    "depthwise_conv", forward=_forward, backward=_backward, reference=_reference, cpu=_KERNELS, cuda=_KERNELS
)
