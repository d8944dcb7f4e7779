"""The one registration helper of the compiled kernels: `CompiledOp`.

An op declares its kernel entry points (the names of its forward and backward functions in the
compiled extension of each device) and its forward and backward formulas (how they call those
functions); `CompiledOp` makes from them

* the ``torch.library`` custom ops ``talk_hf::<name>`` and ``talk_hf::<name>_backward``, with fake
  (meta) implementations and the autograd formula, so that ``torch.compile`` traces each as one
  opaque node;
* an ``autograd.Function`` with the same formula, for eager calls that autograd records (the
  custom op's Python dispatch cost a SliceNet training step 13% on the CPU);
* the direct kernel call, for eager calls that need no gradient.

Calling a `CompiledOp` picks one of the three (`CompiledOp.__call__`), or the op's PyTorch path (its
``reference``) under a transform (`under_transform`: ``torch.func``'s ``grad``, ``vmap``, ``jacrev``,
``jvp``..., whose wrapped tensors have no storage for a kernel to read, and forward-mode AD, whose
tangents a kernel would drop).  A backward that records its own graph
(``create_graph=True``: gradient penalties, Hessian-vector products) differentiates the reference
too, so that second derivatives are exact: the kernels' backward is opaque to autograd (its
gradients would enter the recorded graph as constants).  Arguments are checked by the public
functions before they get here.  Every op keeps one contract, from which its fake
implementations follow: its output has the shape and dtype of its first input, and its backward
returns one gradient per tensor input, of that input's shape and dtype (an empty tensor for an
absent optional input or a non-float one).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.autograd.forward_ad

from . import _extension

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor types that dispatch as plain tensors

# The ``torch.library`` namespace of the package's custom ops: ``talk_hf``.  A remote-code copy of these
# modules (`talk_hf.export_for_remote_code`, imported by transformers as ``transformers_modules.<folder>...``)
# registers its ops under a namespace of its own: torch lets a later registration of a name replace the
# earlier one without a word, so a copy imported beside talk_hf would otherwise take over talk_hf's ops (a
# compiled step of talk_hf's models would run the copy's PyTorch path, which has no kernels).
OP_NAMESPACE = (
    "talk_hf"
    if __name__.startswith("talk_hf.")
    else "talk_hf_copy_" + hashlib.sha256(__name__.encode()).hexdigest()[:16]
)


def needs_custom_op(*tensors: torch.Tensor | None) -> bool:
    """Whether a call must go through the registered custom op rather than the extension directly:
    while ``torch.compile`` traces (the op is one opaque graph node), or for tensor subclasses other
    than ``nn.Parameter`` (which dispatch on the op)."""
    if torch.compiler.is_compiling():
        return True
    for tensor in tensors:  # a loop, not any(generator): this runs on every op call
        if tensor is not None and type(tensor) not in _PLAIN:
            return True
    return False


def under_transform() -> bool:
    """Whether a ``torch.func`` transform or a forward-mode AD level (``forward_ad.dual_level``) is
    active: a kernel cannot read the first's wrapped tensors and would drop the second's tangents."""
    return torch._C._are_functorch_transforms_active() or torch.autograd.forward_ad._current_level >= 0


def needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a call on ``tensors``."""
    if torch.is_grad_enabled():
        for tensor in tensors:
            if tensor is not None and tensor.requires_grad:
                return True
    return False


@dataclass(frozen=True)
class KernelEntries:
    """The names of an op's forward and backward functions in a compiled extension module."""

    forward: str
    backward: str


class CompiledOp:
    """An op's compiled kernels, registered three ways (module docstring); call it like its forward.

    Args:
        name: the op's name: ``talk_hf::<name>`` and ``talk_hf::<name>_backward`` are registered (in
            `OP_NAMESPACE`).
        forward: ``forward(kernel, *inputs) -> output``: the forward formula, calling ``kernel``, the
            forward entry point of the inputs' device.  Its parameters after ``kernel`` carry type
            annotations (``torch.Tensor``, ``torch.Tensor | None``, ``int``, ``bool``) and defaults:
            they are the custom op's schema (a trailing optional tensor with default None, e.g. a
            packed row's document edges, can be left out by callers of the custom op).  The
            autograd formula saves the tensors and keeps the rest as they are.
        backward: ``backward(kernel, grad_out, *inputs) -> gradients``: the backward formula, calling
            the backward entry point; one entry per tensor input, in order: its gradient, in any float
            dtype (anything for an absent or non-float input, which gets none).
        reference: ``reference(*inputs) -> output``: the op's PyTorch path, taking the forward
            formula's inputs (without ``kernel``): it runs under ``torch.func`` transforms, and a
            backward with ``create_graph=True`` differentiates it (module docstring).
        cpu: the entry points in the CPU extension.
        cuda: the entry points in the CUDA extension.
    """

    def __init__(
        self,
        name: str,
        *,
        forward: Callable[..., torch.Tensor],
        backward: Callable[..., tuple[torch.Tensor, ...]],
        reference: Callable[..., torch.Tensor],
        cpu: KernelEntries,
        cuda: KernelEntries,
    ):
        self.name = name
        self._forward_formula, self._backward_formula, self._reference = forward, backward, reference
        self._entries = {"cpu": cpu, "cuda": cuda}
        inputs = list(inspect.signature(forward, eval_str=True).parameters.values())[1:]
        self._tensor_positions = tuple(i for i, parameter in enumerate(inputs) if parameter.annotation in _TENSOR_TYPES)
        self._defaults = tuple(parameter.default for parameter in inputs)
        grad_out = inspect.Parameter("grad_out", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
        self.custom_op = torch.library.custom_op(
            f"{OP_NAMESPACE}::{name}", self.run_forward, mutates_args=(), schema=_schema(inputs, torch.Tensor)
        )
        self.backward_op = torch.library.custom_op(
            f"{OP_NAMESPACE}::{name}_backward",
            self.run_backward,
            mutates_args=(),
            schema=_schema([grad_out, *inputs], list[torch.Tensor]),
        )
        self.custom_op.register_fake(lambda *inputs: inputs[0].new_empty(inputs[0].shape))
        self.backward_op.register_fake(self._fake_backward)
        self.custom_op.register_autograd(self._backward, setup_context=self._setup_context)
        self.function = _eager_function(name, self.run_forward, self._setup_context, self._backward)

    def __call__(self, *inputs):
        """The forward, given every input of the forward formula: through the custom op where
        `needs_custom_op`, the ``autograd.Function`` where autograd records the call, else the
        kernel directly; the reference `under_transform`."""
        if under_transform():
            return self._reference(*inputs)
        tensors = self._tensors(inputs)
        if needs_custom_op(*tensors):
            return self.custom_op(*inputs)
        if needs_autograd(*tensors):
            return self.function.apply(*inputs)
        return self.run_forward(*inputs)

    def kernel(self, tensor: torch.Tensor, direction: str) -> Callable:
        """The ``direction`` ("forward" or "backward") entry point of the extension of ``tensor``'s
        device."""
        kind = tensor.device.type
        return getattr(_extension.load(kind), getattr(self._entries[kind], direction))

    def run_forward(self, *inputs) -> torch.Tensor:
        """The forward formula on the kernels of the inputs' device."""
        return self._forward_formula(self.kernel(inputs[0], "forward"), *inputs)

    def run_backward(self, grad_out: torch.Tensor, *inputs) -> list[torch.Tensor]:
        """The backward formula on the kernels of the inputs' device: one gradient per tensor input,
        in its dtype; an empty tensor for an input without one (`_has_gradient`)."""
        inputs = self._complete(inputs)
        gradients = self._backward_formula(self.kernel(inputs[0], "backward"), grad_out, *inputs)
        return [
            gradient.to(tensor.dtype) if _has_gradient(tensor) else grad_out.new_empty(0)
            for tensor, gradient in zip(self._tensors(inputs), gradients, strict=True)
        ]

    def _fake_backward(self, grad_out: torch.Tensor, *inputs) -> list[torch.Tensor]:
        return [
            tensor.new_empty(tensor.shape) if _has_gradient(tensor) else grad_out.new_empty(0)
            for tensor in self._tensors(self._complete(inputs))
        ]

    def _complete(self, inputs: tuple) -> tuple:
        """The inputs with the trailing ones the dispatcher left out (those equal to their default,
        when it traces) put back."""
        return (*inputs, *self._defaults[len(inputs) :])

    def _tensors(self, inputs: tuple) -> list[torch.Tensor | None]:
        """The tensor inputs among an op's (complete) inputs, in order."""
        return [inputs[position] for position in self._tensor_positions]

    def _setup_context(self, ctx, inputs: tuple, output: torch.Tensor) -> None:
        inputs = self._complete(inputs)
        ctx.save_for_backward(*self._tensors(inputs))
        # The other inputs as they are, with a hole (None) where a saved tensor goes.
        ctx.other_inputs = [None if i in self._tensor_positions else value for i, value in enumerate(inputs)]

    def _backward(self, ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        tensors = ctx.saved_tensors  # each read unpacks them again
        inputs = list(ctx.other_inputs)
        for position, tensor in zip(self._tensor_positions, tensors, strict=True):
            inputs[position] = tensor
        if needs_custom_op(grad_out, *tensors):  # tracing: the backward op, one opaque node
            gradients = self.backward_op(grad_out, *inputs)
        elif torch.is_grad_enabled():  # create_graph=True: gradients that autograd can differentiate again
            return self._reference_gradients(grad_out, inputs, tensors)
        else:
            gradients = self._backward_formula(self.kernel(inputs[0], "backward"), grad_out, *inputs)
        result: list[torch.Tensor | None] = [None] * len(inputs)
        for position, tensor, gradient in zip(self._tensor_positions, tensors, gradients, strict=True):
            if _has_gradient(tensor):
                result[position] = gradient if gradient.dtype == tensor.dtype else gradient.to(tensor.dtype)
        return tuple(result)

    def _reference_gradients(
        self, grad_out: torch.Tensor, inputs: list, tensors: tuple
    ) -> tuple[torch.Tensor | None, ...]:
        """The gradients of the reference's output, recorded (``create_graph``): one per input, None
        where no gradient is wanted.  ``inputs`` are the complete inputs, ``tensors`` the saved ones,
        still attached to their graph.  The reference runs on an alias of each (a view, its own
        graph node): its gradients are the partial derivatives, not the totals through an input
        computed from another (offsets predicted from x)."""
        inputs = list(inputs)
        aliases = []
        for position, tensor in zip(self._tensor_positions, tensors, strict=True):
            if tensor is not None and tensor.requires_grad:
                inputs[position] = tensor.view_as(tensor)
                aliases.append((position, inputs[position]))
        output = self._reference(*inputs)
        gradients = torch.autograd.grad(
            output, [alias for _, alias in aliases], grad_out, create_graph=True, allow_unused=True
        )
        result: list[torch.Tensor | None] = [None] * len(inputs)
        for (position, _), gradient in zip(aliases, gradients, strict=True):
            result[position] = gradient
        return tuple(result)


_TENSOR_TYPES = (torch.Tensor, torch.Tensor | None)


def _has_gradient(tensor: torch.Tensor | None) -> bool:
    """Whether an op's tensor input gets a gradient: given, and floating-point (not a bool mask
    or integer document edges)."""
    return tensor is not None and tensor.is_floating_point()


def _schema(parameters: list[inspect.Parameter], returns) -> str:
    """The custom-op schema of a function with these parameters and return annotation."""

    def prototype(): ...

    prototype.__signature__ = inspect.Signature(parameters, return_annotation=returns)
    return torch.library.infer_schema(prototype, mutates_args=())


def _eager_function(name: str, run_forward, setup_context, backward) -> type[torch.autograd.Function]:
    """An ``autograd.Function`` that runs ``run_forward`` with an op's ``setup_context`` and ``backward``:
    the op's autograd in eager mode, without the custom op's dispatch.

    Its forward takes ``ctx`` and calls ``setup_context`` itself: a Function that declares a
    separate ``setup_context`` makes every ``apply`` bind its arguments through
    ``inspect.signature`` (about 50 us a call on a 2-core VM, 20 times the kernel at small sizes).
    """

    def forward(ctx, *inputs):
        output = run_forward(*inputs)
        setup_context(ctx, inputs, output)
        return output

    members = dict(forward=staticmethod(forward), backward=staticmethod(backward))
    return type(name, (torch.autograd.Function,), members)
