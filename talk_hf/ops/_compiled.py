"""The compiled kernels behind the ops, registered as ``torch.library`` custom ops.

Each op runs the extension of its tensors' device (``_extension.load("cpu" | "cuda")``) and has a
fake (meta) implementation and an autograd formula, so ``torch.compile`` traces through it as one
opaque node.  Arguments are checked by the public functions before they get here.  On CUDA,
talk_conv, dynamic_conv and light_conv run the tiled kernels (csrc/cuda_ops.cu) unless
``$TALK_HF_UNVERIFIED_CUDA`` names the op (:mod:`._unverified`): then their streaming kernels
(csrc/cuda_talk_stream.cu, csrc/cuda_conv_stream.cu), not yet verified on a GPU (:func:`_kernel`).

Ops (all tensors batch-first; ``K`` taps, ``H`` heads):

* ``talk_hf::talk_conv(x (B,T,C), offset_left (B,T,H), offset_right (B,T,H) | None, max_left,
  max_right) -> (B,T,C)`` and its ``talk_hf::talk_conv_backward``;
* ``talk_hf::dynamic_conv(x, weight (B,T,H,K), padding_l)``, ``talk_hf::light_conv(x, weight
  (H,K), padding_l)`` and their shared ``talk_hf::conv_backward``, which returns the gradient for
  x and the per-token weight gradient (B,T,H,K) in float32 (float64 for float64 input);
* ``talk_hf::depthwise_conv(x, weight (C,K), dilation, left)`` and its
  ``talk_hf::depthwise_conv_backward``, which returns the gradient for x and the weight's gradient
  (C,K) summed over batch and time, in float32 (float64 for float64 input).
"""

from __future__ import annotations

import torch

from . import _extension
from ._precision import accumulation_dtype
from ._unverified import unverified_cuda_enabled


def _module(tensor: torch.Tensor):
    return _extension.load(tensor.device.type)


def _kernel(tensor: torch.Tensor, op: str, entry: str):
    """The extension function ``entry`` of ``tensor``'s device; on CUDA, where ``$TALK_HF_UNVERIFIED_CUDA``
    names ``op``, its streaming variant ``entry + "_stream"`` (csrc/cuda_talk_stream.cu,
    csrc/cuda_conv_stream.cu), which falls back to the tiled kernels for shapes it does not take."""
    module = _module(tensor)
    if tensor.device.type == "cuda" and unverified_cuda_enabled(op):
        return getattr(module, f"{entry}_stream")
    return getattr(module, entry)


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor types that dispatch as plain tensors


def needs_custom_op(*tensors: torch.Tensor | None) -> bool:
    """Whether a call must go through the registered custom op rather than the extension directly:
    while ``torch.compile`` traces (the op is one opaque graph node), when autograd records the
    call, or for tensor subclasses other than ``nn.Parameter`` (which dispatch on the op)."""
    if torch.compiler.is_compiling():
        return True
    grad_enabled = torch.is_grad_enabled()
    for tensor in tensors:
        if tensor is not None and (type(tensor) not in _PLAIN or (grad_enabled and tensor.requires_grad)):
            return True
    return False


def _per_token(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """LightConv's (H, K) kernel as a (B, T, H, K) view with zero batch and time strides."""
    return weight.expand(x.shape[0], x.shape[1], *weight.shape)


# --- TaLK ------------------------------------------------------------------------------------


@torch.library.custom_op("talk_hf::talk_conv", mutates_args=())
def talk_conv(
    x: torch.Tensor, offset_left: torch.Tensor, offset_right: torch.Tensor | None, max_left: int, max_right: int
) -> torch.Tensor:
    return _kernel(x, "talk_conv", "talk_forward")(x, offset_left, offset_right, max_left, max_right)


@talk_conv.register_fake
def _(x, offset_left, offset_right, max_left, max_right):
    return x.new_empty(x.shape)


@torch.library.custom_op("talk_hf::talk_conv_backward", mutates_args=())
def talk_conv_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients for x, offset_left and offset_right (an empty tensor in the causal form)."""
    return tuple(_kernel(x, "talk_conv", "talk_backward")(grad_out, x, offset_left, offset_right, max_left, max_right))


@talk_conv_backward.register_fake
def _(grad_out, x, offset_left, offset_right, max_left, max_right):
    right_shape = (0,) if offset_right is None else offset_right.shape
    return x.new_empty(x.shape), x.new_empty(offset_left.shape), x.new_empty(right_shape)


def _talk_setup(ctx, inputs, output):
    x, offset_left, offset_right, ctx.max_left, ctx.max_right = inputs
    ctx.save_for_backward(x, offset_left, offset_right)


def _talk_backward(ctx, grad_out):
    x, offset_left, offset_right = ctx.saved_tensors
    grad_x, grad_left, grad_right = talk_conv_backward(
        grad_out, x, offset_left, offset_right, ctx.max_left, ctx.max_right
    )
    return grad_x, grad_left, None if offset_right is None else grad_right, None, None


talk_conv.register_autograd(_talk_backward, setup_context=_talk_setup)


def run_talk_conv(x, offset_left, offset_right, max_left: int, max_right: int) -> torch.Tensor:
    """``talk_hf::talk_conv``, called directly when `needs_custom_op` allows."""
    if needs_custom_op(x, offset_left, offset_right):
        return talk_conv(x, offset_left, offset_right, max_left, max_right)
    return _kernel(x, "talk_conv", "talk_forward")(x, offset_left, offset_right, max_left, max_right)


# --- DynamicConv / LightConv -----------------------------------------------------------------


@torch.library.custom_op("talk_hf::dynamic_conv", mutates_args=())
def dynamic_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    return _kernel(x, "dynamic_conv", "conv_forward")(x, weight, padding_l)


@torch.library.custom_op("talk_hf::light_conv", mutates_args=())
def light_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    return _kernel(x, "light_conv", "conv_forward")(x, _per_token(weight, x), padding_l)


@torch.library.custom_op("talk_hf::conv_backward", mutates_args=())
def conv_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, padding_l: int, sum_weight_gradient: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient for x and the weight's gradient in the accumulation dtype: per token (B, T, H, K),
    or with ``sum_weight_gradient`` (LightConv's shared kernel) summed over batch and time, (H, K)."""
    op = "light_conv" if sum_weight_gradient else "dynamic_conv"  # LightConv sums its shared kernel's gradient
    return tuple(_kernel(x, op, "conv_backward")(grad_out, x, weight, padding_l, sum_weight_gradient))


@dynamic_conv.register_fake
def _(x, weight, padding_l):
    return x.new_empty(x.shape)


@light_conv.register_fake
def _(x, weight, padding_l):
    return x.new_empty(x.shape)


@conv_backward.register_fake
def _(grad_out, x, weight, padding_l, sum_weight_gradient):
    shape = weight.shape[-2:] if sum_weight_gradient else (*x.shape[:2], *weight.shape[-2:])
    return x.new_empty(x.shape), x.new_empty(shape, dtype=accumulation_dtype(x.dtype))


def _conv_setup(ctx, inputs, output):
    x, weight, ctx.padding_l = inputs
    ctx.save_for_backward(x, weight)


def _dynamic_backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    grad_x, grad_weight = conv_backward(grad_out, x, weight, ctx.padding_l, False)
    return grad_x, grad_weight.to(weight.dtype), None


def _light_backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    grad_x, grad_weight = conv_backward(grad_out, x, _per_token(weight, x), ctx.padding_l, True)
    return grad_x, grad_weight.to(weight.dtype), None


dynamic_conv.register_autograd(_dynamic_backward, setup_context=_conv_setup)
light_conv.register_autograd(_light_backward, setup_context=_conv_setup)


def run_dynamic_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    """``talk_hf::dynamic_conv``, called directly when `needs_custom_op` allows."""
    if needs_custom_op(x, weight):
        return dynamic_conv(x, weight, padding_l)
    return _kernel(x, "dynamic_conv", "conv_forward")(x, weight, padding_l)


def run_light_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    """``talk_hf::light_conv``, called directly when `needs_custom_op` allows."""
    if needs_custom_op(x, weight):
        return light_conv(x, weight, padding_l)
    return _kernel(x, "light_conv", "conv_forward")(x, _per_token(weight, x), padding_l)


# --- Depthwise convolution -------------------------------------------------------------------


@torch.library.custom_op("talk_hf::depthwise_conv", mutates_args=())
def depthwise_conv(x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int) -> torch.Tensor:
    return _module(x).depthwise_forward(x, weight, dilation, left)


@torch.library.custom_op("talk_hf::depthwise_conv_backward", mutates_args=())
def depthwise_conv_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient for x and the weight's gradient (C, K), summed over batch and time, in the accumulation dtype."""
    return tuple(_module(x).depthwise_backward(grad_out, x, weight, dilation, left))


@depthwise_conv.register_fake
def _(x, weight, dilation, left):
    return x.new_empty(x.shape)


@depthwise_conv_backward.register_fake
def _(grad_out, x, weight, dilation, left):
    return x.new_empty(x.shape), x.new_empty(weight.shape, dtype=accumulation_dtype(x.dtype))


def _depthwise_setup(ctx, inputs, output):
    x, weight, ctx.dilation, ctx.left = inputs
    ctx.save_for_backward(x, weight)


def _depthwise_backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    grad_x, grad_weight = depthwise_conv_backward(grad_out, x, weight, ctx.dilation, ctx.left)
    return grad_x, grad_weight.to(weight.dtype), None, None


depthwise_conv.register_autograd(_depthwise_backward, setup_context=_depthwise_setup)


def run_depthwise_conv(x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int) -> torch.Tensor:
    """``talk_hf::depthwise_conv``, called directly when `needs_custom_op` allows."""
    if needs_custom_op(x, weight):
        return depthwise_conv(x, weight, dilation, left)
    return _module(x).depthwise_forward(x, weight, dilation, left)
