"""The compiled kernels behind the ops, registered as ``torch.library`` custom ops.

Each op runs the extension of its tensors' device (``_extension.load("cpu" | "cuda")``) and has a
fake (meta) implementation and an autograd formula, so ``torch.compile`` traces through it as one
opaque node.  Arguments are checked by the public functions before they get here.  The ``run_*``
functions call an op three ways (`_run`): through the custom op while ``torch.compile`` traces or
for tensor subclasses; through an ``autograd.Function`` with the same formula when autograd records
an eager call (the custom op's Python dispatch cost a SliceNet training step 13% on the CPU); and
straight to the kernel otherwise.  On CUDA,
talk_conv, dynamic_conv and light_conv run the tiled kernels (csrc/cuda_ops.cu) unless
``$TALK_HF_UNVERIFIED_CUDA`` names the op (:mod:`._unverified`): then their streaming kernels
(csrc/cuda_talk_stream.cu, csrc/cuda_conv_stream.cu), not yet verified on a GPU (:func:`_kernel`).

Ops (all tensors batch-first; ``K`` taps, ``H`` heads):

* ``talk_hf::talk_conv(x (B,T,C), offset_left (B,T,H), offset_right (B,T,H) | None, max_left,
  max_right) -> (B,T,C)`` and its ``talk_hf::talk_conv_backward``;
* ``talk_hf::dynamic_conv(x, weight (B,T,H,K), padding_l)``, ``talk_hf::light_conv(x, weight
  (H,K), padding_l)`` and their shared ``talk_hf::conv_backward``, which returns the gradient for
  x and the per-token weight gradient (B,T,H,K) in float32 (float64 for float64 input);
* ``talk_hf::depthwise_conv(x, weight (C,K), dilation, left, input_mask (B,T) bool | None, relu)``
  (the input gated by the ReLU and the mask inside the kernel) and its
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
    while ``torch.compile`` traces (the op is one opaque graph node), or for tensor subclasses other
    than ``nn.Parameter`` (which dispatch on the op)."""
    if torch.compiler.is_compiling():
        return True
    return any(tensor is not None and type(tensor) not in _PLAIN for tensor in tensors)


def needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a call on ``tensors``."""
    return torch.is_grad_enabled() and any(tensor is not None and tensor.requires_grad for tensor in tensors)


def _tensors(args: tuple) -> list[torch.Tensor]:
    return [arg for arg in args if isinstance(arg, torch.Tensor)]


def _eager_function(name: str, kernel, setup_context, backward) -> type[torch.autograd.Function]:
    """An ``autograd.Function`` that runs ``kernel`` with an op's own ``setup_context`` and ``backward``:
    the op's autograd in eager mode, without the custom op's dispatch.  ``kernel`` stays reachable
    as its attribute ``kernel``.

    Its forward takes ``ctx`` and calls ``setup_context`` itself: a Function that declares a
    separate ``setup_context`` makes every ``apply`` bind its arguments through
    ``inspect.signature`` (about 50 us a call on a 2-core VM, 20 times the kernel at small sizes).
    """

    def forward(ctx, *args):
        output = kernel(*args)
        setup_context(ctx, args, output)
        return output

    members = dict(forward=staticmethod(forward), backward=staticmethod(backward), kernel=staticmethod(kernel))
    return type(name, (torch.autograd.Function,), members)


def _run(custom_op, function: type[torch.autograd.Function], *args):
    """An op's forward: ``custom_op(*args)`` where `needs_custom_op`, ``function`` (`_eager_function`)
    where autograd records the call, else the kernel (``function.kernel``) directly."""
    tensors = _tensors(args)
    if needs_custom_op(*tensors):
        return custom_op(*args)
    if needs_autograd(*tensors):
        return function.apply(*args)
    return function.kernel(*args)


def _call(custom_op, kernel, *args):
    """A backward op: ``custom_op(*args)`` where `needs_custom_op` (tracing), else ``kernel(*args)``."""
    return custom_op(*args) if needs_custom_op(*_tensors(args)) else kernel(*args)


def _per_token(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """LightConv's (H, K) kernel as a (B, T, H, K) view with zero batch and time strides."""
    return weight.expand(x.shape[0], x.shape[1], *weight.shape)


# --- TaLK ------------------------------------------------------------------------------------


def talk_forward_kernel(
    x: torch.Tensor, offset_left: torch.Tensor, offset_right: torch.Tensor | None, max_left: int, max_right: int
) -> torch.Tensor:
    return _kernel(x, "talk_conv", "talk_forward")(x, offset_left, offset_right, max_left, max_right)


def talk_backward_kernel(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients for x, offset_left and offset_right (an empty tensor in the causal form)."""
    return tuple(_kernel(x, "talk_conv", "talk_backward")(grad_out, x, offset_left, offset_right, max_left, max_right))


talk_conv = torch.library.custom_op("talk_hf::talk_conv", talk_forward_kernel, mutates_args=())
talk_conv_backward = torch.library.custom_op("talk_hf::talk_conv_backward", talk_backward_kernel, mutates_args=())


@talk_conv.register_fake
def _(x, offset_left, offset_right, max_left, max_right):
    return x.new_empty(x.shape)


@talk_conv_backward.register_fake
def _(grad_out, x, offset_left, offset_right, max_left, max_right):
    right_shape = (0,) if offset_right is None else offset_right.shape
    return x.new_empty(x.shape), x.new_empty(offset_left.shape), x.new_empty(right_shape)


def _talk_setup(ctx, inputs, output):
    x, offset_left, offset_right, ctx.max_left, ctx.max_right = inputs
    ctx.save_for_backward(x, offset_left, offset_right)


def _talk_backward(ctx, grad_out):
    x, offset_left, offset_right = ctx.saved_tensors
    grad_x, grad_left, grad_right = _call(
        talk_conv_backward, talk_backward_kernel, grad_out, x, offset_left, offset_right, ctx.max_left, ctx.max_right
    )
    return grad_x, grad_left, None if offset_right is None else grad_right, None, None


talk_conv.register_autograd(_talk_backward, setup_context=_talk_setup)
_TalkConv = _eager_function("TalkConv", talk_forward_kernel, _talk_setup, _talk_backward)


def run_talk_conv(x, offset_left, offset_right, max_left: int, max_right: int) -> torch.Tensor:
    """``talk_hf::talk_conv`` by `_run`."""
    return _run(talk_conv, _TalkConv, x, offset_left, offset_right, max_left, max_right)


# --- DynamicConv / LightConv -----------------------------------------------------------------


def dynamic_forward_kernel(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    return _kernel(x, "dynamic_conv", "conv_forward")(x, weight, padding_l)


def light_forward_kernel(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    return _kernel(x, "light_conv", "conv_forward")(x, _per_token(weight, x), padding_l)


def conv_backward_kernel(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, padding_l: int, sum_weight_gradient: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient for x and the weight's gradient in the accumulation dtype: per token (B, T, H, K),
    or with ``sum_weight_gradient`` (LightConv's shared kernel) summed over batch and time, (H, K)."""
    op = "light_conv" if sum_weight_gradient else "dynamic_conv"  # LightConv sums its shared kernel's gradient
    return tuple(_kernel(x, op, "conv_backward")(grad_out, x, weight, padding_l, sum_weight_gradient))


dynamic_conv = torch.library.custom_op("talk_hf::dynamic_conv", dynamic_forward_kernel, mutates_args=())
light_conv = torch.library.custom_op("talk_hf::light_conv", light_forward_kernel, mutates_args=())
conv_backward = torch.library.custom_op("talk_hf::conv_backward", conv_backward_kernel, mutates_args=())


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
    grad_x, grad_weight = _call(conv_backward, conv_backward_kernel, grad_out, x, weight, ctx.padding_l, False)
    return grad_x, grad_weight.to(weight.dtype), None


def _light_backward(ctx, grad_out):
    x, weight = ctx.saved_tensors
    per_token = _per_token(weight, x)
    grad_x, grad_weight = _call(conv_backward, conv_backward_kernel, grad_out, x, per_token, ctx.padding_l, True)
    return grad_x, grad_weight.to(weight.dtype), None


dynamic_conv.register_autograd(_dynamic_backward, setup_context=_conv_setup)
light_conv.register_autograd(_light_backward, setup_context=_conv_setup)
_DynamicConv = _eager_function("DynamicConv", dynamic_forward_kernel, _conv_setup, _dynamic_backward)
_LightConv = _eager_function("LightConv", light_forward_kernel, _conv_setup, _light_backward)


def run_dynamic_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    """``talk_hf::dynamic_conv`` by `_run`."""
    return _run(dynamic_conv, _DynamicConv, x, weight, padding_l)


def run_light_conv(x: torch.Tensor, weight: torch.Tensor, padding_l: int) -> torch.Tensor:
    """``talk_hf::light_conv`` by `_run`."""
    return _run(light_conv, _LightConv, x, weight, padding_l)


# --- Depthwise convolution -------------------------------------------------------------------


def depthwise_forward_kernel(
    x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int, input_mask: torch.Tensor | None, relu: bool
) -> torch.Tensor:
    return _module(x).depthwise_forward(x, weight, dilation, left, input_mask, relu)


def depthwise_backward_kernel(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    dilation: int,
    left: int,
    input_mask: torch.Tensor | None,
    relu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradient for x (through the input gate) and the weight's gradient (C, K), summed over batch
    and time, in the accumulation dtype."""
    return tuple(_module(x).depthwise_backward(grad_out, x, weight, dilation, left, input_mask, relu))


depthwise_conv = torch.library.custom_op("talk_hf::depthwise_conv", depthwise_forward_kernel, mutates_args=())
depthwise_conv_backward = torch.library.custom_op(
    "talk_hf::depthwise_conv_backward", depthwise_backward_kernel, mutates_args=()
)


@depthwise_conv.register_fake
def _(x, weight, dilation, left, input_mask, relu):
    return x.new_empty(x.shape)


@depthwise_conv_backward.register_fake
def _(grad_out, x, weight, dilation, left, input_mask, relu):
    return x.new_empty(x.shape), x.new_empty(weight.shape, dtype=accumulation_dtype(x.dtype))


def _depthwise_setup(ctx, inputs, output):
    x, weight, ctx.dilation, ctx.left, input_mask, ctx.relu = inputs
    ctx.save_for_backward(x, weight, input_mask)


def _depthwise_backward(ctx, grad_out):
    x, weight, input_mask = ctx.saved_tensors
    grad_x, grad_weight = _call(
        depthwise_conv_backward,
        depthwise_backward_kernel,
        grad_out,
        x,
        weight,
        ctx.dilation,
        ctx.left,
        input_mask,
        ctx.relu,
    )
    return grad_x, grad_weight.to(weight.dtype), None, None, None, None


depthwise_conv.register_autograd(_depthwise_backward, setup_context=_depthwise_setup)
_DepthwiseConv = _eager_function("DepthwiseConv", depthwise_forward_kernel, _depthwise_setup, _depthwise_backward)


def run_depthwise_conv(
    x: torch.Tensor, weight: torch.Tensor, dilation: int, left: int, input_mask: torch.Tensor | None, relu: bool
) -> torch.Tensor:
    """``talk_hf::depthwise_conv`` by `_run`."""
    return _run(depthwise_conv, _DepthwiseConv, x, weight, dilation, left, input_mask, relu)
