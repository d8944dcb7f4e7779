"""The ops under the autograd a PyTorch user reaches for beyond ``backward()``: second derivatives
(``create_graph=True``: gradient penalties, Hessian-vector products) and the ``torch.func``
transforms (``grad``, ``vmap``, ``jacrev``, ``jvp``), on every CPU backend: the compiled kernels'
backward is opaque to autograd and their forward cannot read a transform's wrapped tensors, so both
run the op's PyTorch path (`_compiled_op.CompiledOp`), and must agree with it."""

import pytest
import torch
import torch.autograd.forward_ad as forward_ad

from talk_hf.ops import DocumentEdges, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops.grouped_linear import grouped_linear
from talk_hf.ops.linear import linear

from .helpers import offsets_off_the_grid

B, T, C, H, K = 2, 7, 4, 2, 3
PACKED = DocumentEdges(torch.tensor([[0, 1, 2, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6]]))


def _talk(x, offset_left, offset_right):
    return talk_conv(x, offset_left, offset_right, 3, 2)


def _talk_causal_packed(x, offset_left):
    return talk_conv(x, offset_left, None, 4, 0, document_edges=PACKED)


def _dynamic(x, weight):
    return dynamic_conv(x, weight, 1)


def _light_packed(x, weight):
    return light_conv(x, weight, 2, document_edges=PACKED)


def _depthwise_gated(x, weight):
    mask = torch.tensor([[True] * 6 + [False], [True] * 7])
    return depthwise_conv(x, weight, dilation=2, padding="centred", relu_input=True, input_mask=mask)


def _inputs(name: str) -> tuple[torch.Tensor, ...]:
    """float64 inputs of each case, x first (ReLU-gated x kept away from 0, where it has no derivative)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, C, dtype=torch.float64, generator=generator)
    x = x + 0.2 * x.sign()
    shape = (B, T, H)
    others = {
        "talk": lambda: (
            offsets_off_the_grid(shape, 3, generator=generator),
            offsets_off_the_grid(shape, 2, generator=generator),
        ),
        "talk_causal_packed": lambda: (offsets_off_the_grid(shape, 4, generator=generator),),
        "dynamic": lambda: (torch.randn(B, T, H, K, dtype=torch.float64, generator=generator),),
        "light_packed": lambda: (torch.randn(H, K, dtype=torch.float64, generator=generator),),
        "depthwise_gated": lambda: (torch.randn(C, K, dtype=torch.float64, generator=generator),),
    }[name]()
    return (x, *others)


OPS = {
    "talk": _talk,
    "talk_causal_packed": _talk_causal_packed,
    "dynamic": _dynamic,
    "light_packed": _light_packed,
    "depthwise_gated": _depthwise_gated,
}


@pytest.fixture(params=sorted(OPS))
def case(request, each_backend):
    return OPS[request.param], _inputs(request.param)


def _on_torch(op, monkeypatch):
    """``op`` run on the "torch" backend (the reference of the checks)."""

    def on_torch(*inputs):
        with monkeypatch.context() as patch:
            patch.setenv("TALK_HF_BACKEND", "torch")
            return op(*inputs)

    return on_torch


def test_gradgradcheck(case):
    op, inputs = case
    inputs = [tensor.requires_grad_() for tensor in inputs]
    assert torch.autograd.gradgradcheck(op, inputs, eps=1e-6, atol=1e-6)


def test_gradient_penalty_through_inputs_computed_from_x(case, monkeypatch):
    """Offsets and kernels predicted from x (as in the layers), a residual around the op: the
    penalty's second derivatives are the partial derivatives' (not the totals through x), and the
    op's part is not dropped."""
    op, (x, *others) = case
    projection = torch.randn(C, C, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def penalty_gradients(run):
        leaves = [tensor.clone().requires_grad_() for tensor in (x, projection, *others)]
        x_leaf, projection_leaf, *other_leaves = leaves
        mixed = x_leaf @ projection_leaf
        inputs = [other * torch.sigmoid(mixed.sum()) for other in other_leaves]
        out = mixed * mixed + run(mixed, *inputs)
        gradients = torch.autograd.grad(out.pow(2).sum(), leaves, create_graph=True)
        return torch.autograd.grad(sum(gradient.pow(2).sum() for gradient in gradients), leaves)

    for actual, expected in zip(penalty_gradients(op), penalty_gradients(_on_torch(op, monkeypatch)), strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-9, rtol=1e-9)


def test_torch_func_transforms(case, monkeypatch):
    op, (x, *others) = case
    tangent = torch.ones_like(x)
    for transform in (
        lambda run: torch.func.grad(lambda x: run(x, *others).pow(2).sum())(x),
        lambda run: torch.func.jacrev(lambda x: run(x, *others).sum(-1))(x),
        lambda run: torch.func.jvp(lambda x: run(x, *others), (x,), (tangent,))[1],
    ):
        torch.testing.assert_close(transform(op), transform(_on_torch(op, monkeypatch)), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    "name,op",
    [
        ("talk", _talk),
        ("dynamic", _dynamic),
        ("light_packed", lambda x, weight: light_conv(x, weight, 2)),
        ("depthwise_gated", lambda x, weight: depthwise_conv(x, weight, relu_input=True)),
    ],
)
def test_vmap_over_the_batch(name, op, each_backend):
    """vmap over the rows of x and of the per-token inputs (talk_conv's offset checks on the "torch"
    path cannot read a batched tensor back, and skip under a transform)."""
    x, *others = _inputs(name)
    in_dims = tuple(0 if tensor.shape[:2] == (B, T) else None for tensor in (x, *others))

    def one_row(*row):
        return op(*(tensor[None] if dim == 0 else tensor for tensor, dim in zip(row, in_dims, strict=True)))[0]

    torch.testing.assert_close(torch.func.vmap(one_row, in_dims=in_dims)(x, *others), op(x, *others))


def test_grouped_linear_second_derivatives_and_transforms():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(3, 4, 2, dtype=torch.float64, generator=generator, requires_grad=True)
    assert torch.autograd.gradgradcheck(grouped_linear, (x, weight))
    einsum = torch.einsum("ngi,goi->ngo", x.detach().view(10, 3, 2), weight.detach()).reshape(2, 5, 12)
    batched = torch.func.vmap(lambda row: grouped_linear(row, weight.detach()))(x.detach())
    torch.testing.assert_close(batched, einsum)
    gradient = torch.func.grad(lambda x: grouped_linear(x, weight.detach()).sum())(x.detach())
    torch.testing.assert_close(gradient, weight.detach().sum(1).reshape(6).expand(2, 5, 6))


def test_few_row_linear_under_torch_func(each_backend):
    """A decoding step's few-row product (the CPU kernel's calls, without autograd) under vmap and jvp."""
    generator = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(*shape, generator=generator) for shape in ((3, 1, 16), (8, 16), (8,)))
    expected = torch.nn.functional.linear(x, weight, bias)
    torch.testing.assert_close(torch.func.vmap(lambda row: linear(row, weight, bias))(x), expected)
    _, tangent = torch.func.jvp(lambda x: linear(x, weight, bias), (x,), (torch.ones_like(x),))
    torch.testing.assert_close(tangent, torch.nn.functional.linear(torch.ones_like(x), weight))


def test_forward_mode_ad_keeps_the_tangents(case, monkeypatch):
    """``torch.autograd.forward_ad`` (dual tensors, which do not require grad): the tangent of every
    op, of grouped_linear and of the few-row linear, as on the "torch" backend (not dropped)."""
    op, (x, *others) = case
    generator = torch.Generator().manual_seed(2)
    weights = torch.randn(2, 3, 2, dtype=torch.float64, generator=generator), torch.randn(3, 4, dtype=torch.float64)

    def tangents(run):
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(x, torch.ones_like(x))
            outputs = run(dual, *others), grouped_linear(dual, weights[0]), linear(dual[:1, :1], weights[1])
            return [forward_ad.unpack_dual(output).tangent for output in outputs]

    for actual, expected in zip(tangents(op), tangents(_on_torch(op, monkeypatch)), strict=True):
        torch.testing.assert_close(actual, expected, atol=1e-12, rtol=1e-12)
