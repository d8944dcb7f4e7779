"""``grouped_linear``: a linear map in channel groups (a grouped 1x1 convolution) on (..., C) tensors,
without the layout copies of its ``einsum`` form:

    out[..., g * O + o] = sum_i weight[g, o, i] * x[..., g * I + i]

``torch.einsum("...gi,goi->...go", ...)`` computes this as one batched product over the groups,
which wants the groups outermost: it copies x into (G, N, I) and its (G, N, O) result back, and
its backward copies twice more.  Here one batched product (``bmm``) reads each group's columns of
x where they lie, as a strided (G, N, I) view, and writes each group's columns of the output where
they belong, forward and backward (`_GroupedLinear`), which measured faster than the einsum in
SliceNet's training step (docs/models.md).  While ``torch.compile`` traces, for tensor subclasses
and under autocast it runs the einsum, which the compiler lays out and autocast casts itself, and
under a ``torch.func`` transform or forward-mode AD (`_compiled_op.under_transform`), which the
strided products (``bmm`` with ``out=``) do not support.  A backward that records its graph (``create_graph=True``) computes the
gradients by einsums too, which autograd can differentiate again.
"""

from __future__ import annotations

import torch

from ._compiled_op import needs_autograd, needs_custom_op, under_transform
from ._validation import check_same_device_and_dtype, check_tensor


def grouped_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A linear map without bias in G channel groups.

    Args:
        x: (..., G * I) input, at least one leading dim.
        weight: (G, O, I): group g maps channels [g * I, (g + 1) * I) of x to channels
            [g * O, (g + 1) * O) of the output.

    Returns:
        (..., G * O) tensor of x's dtype.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x must be a tensor of shape (..., G * I) with at least 2 dims, got {_shape_of(x)}")
    check_tensor("weight", weight, 3, "(G, O, I)")
    groups, _, in_per_group = weight.shape
    if x.shape[-1] != groups * in_per_group:
        raise ValueError(
            f"x must have G * I = {groups} * {in_per_group} = {groups * in_per_group} channels in its last dim "
            f"(weight has shape (G, O, I) = {tuple(weight.shape)}), got shape {tuple(x.shape)}"
        )
    if needs_custom_op(x, weight) or torch.is_autocast_enabled(x.device.type) or under_transform():
        return _grouped_einsum(x, weight)
    check_same_device_and_dtype("x", x, weight=weight)
    if needs_autograd(x, weight):
        return _GroupedLinear.apply(x, weight)
    return _grouped_forward(x, weight)


def _shape_of(value) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__


def _grouped_einsum(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The definition as one batched product over the groups (traced and autocast calls)."""
    groups = weight.shape[0]
    return torch.einsum("...gi,goi->...go", x.unflatten(-1, (groups, -1)), weight).flatten(-2)


def _grouped_products(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(N, G * I) rows times the (G, O, I) weight: one batched product over the groups that reads
    each group's columns of the rows where they lie and writes its own columns of the (N, G * O)
    result (strided views, no copies)."""
    groups, out_per_group, _ = weight.shape
    out = rows.new_empty(rows.shape[0], groups, out_per_group)
    torch.bmm(_by_group(rows, groups), weight.transpose(1, 2), out=out.transpose(0, 1))
    return out.view(rows.shape[0], groups * out_per_group)


def _grouped_forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(..., G * I) x times the (G, O, I) weight by `_grouped_products`: (..., G * O)."""
    rows = x.reshape(-1, x.shape[-1])
    return _grouped_products(rows, weight).view(*x.shape[:-1], weight.shape[0] * weight.shape[1])


def _by_group(rows: torch.Tensor, groups: int) -> torch.Tensor:
    """(N, G * W) rows as a (G, N, W) view."""
    return rows.view(rows.shape[0], groups, rows.shape[1] // groups).transpose(0, 1)


class _GroupedLinear(torch.autograd.Function):
    """`grouped_linear`'s eager autograd: the gradients by the same strided batched products, no copies.
    (The forward takes ``ctx``: a separate ``setup_context`` costs every call an ``inspect.signature``.)"""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return _grouped_forward(x, weight)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        x, weight = ctx.saved_tensors
        groups = weight.shape[0]
        if torch.is_grad_enabled():  # create_graph=True: products that autograd records
            return _recorded_gradients(ctx, grad_out, x, weight)
        grad_rows = grad_out.reshape(-1, grad_out.shape[-1])
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:  # the transposed map: (G, I, O) takes O channels to I
            grad_x = _grouped_products(grad_rows, weight.transpose(1, 2)).view(x.shape)
        if ctx.needs_input_grad[1]:  # grad_weight[g] = grad[:, g's O columns]^T @ x[:, g's I columns]
            rows = x.reshape(-1, x.shape[-1])
            grad_weight = torch.bmm(_by_group(grad_rows, groups).transpose(1, 2), _by_group(rows, groups))
        return grad_x, grad_weight


def _recorded_gradients(ctx, grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor):
    """`_GroupedLinear`'s gradients by einsums, which autograd records (a backward with
    ``create_graph=True``): grad x (..., G * I) and grad weight (G, O, I), None where not wanted."""
    grad_x = grad_weight = None
    if ctx.needs_input_grad[0]:
        grad_x = _grouped_einsum(grad_out, weight.transpose(1, 2))
    if ctx.needs_input_grad[1]:
        groups = weight.shape[0]
        by_group = grad_out.unflatten(-1, (groups, -1)).flatten(0, -3), x.unflatten(-1, (groups, -1)).flatten(0, -3)
        grad_weight = torch.einsum("ngo,ngi->goi", *by_group)
    return grad_x, grad_weight
