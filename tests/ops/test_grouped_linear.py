"""grouped_linear against its float64 definition: forward, backward, dtypes, strided inputs, the
paths it takes (eager autograd, no autograd, traced, autocast) and bad arguments."""

import pytest
import torch

from talk_hf.ops.grouped_linear import _GroupedLinear, grouped_linear

from .helpers import assert_close_to_reference


def definition(x, weight):
    """Group by group, in float64: (..., G*I) x (G, O, I) -> (..., G*O)."""
    groups = weight.shape[0]
    parts = x.double().chunk(groups, dim=-1)
    return torch.cat([part @ weight[g].double().t() for g, part in enumerate(parts)], dim=-1)


def make_inputs(shape, groups, out_per_group, dtype):
    """x of ``shape`` (last dim G*I) and a (G, O, I) weight with unit-scale outputs, made in float64."""
    in_per_group = shape[-1] // groups
    x = torch.randn(shape, dtype=torch.float64)
    weight = torch.randn(groups, out_per_group, in_per_group, dtype=torch.float64) / in_per_group**0.5
    return x.to(dtype), weight.to(dtype)


def outputs_and_gradients(op, x, weight):
    """op(x, weight) and the gradients of <out, g> for x and weight, g fixed and random."""
    x, weight = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    out = op(x, weight)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out.backward(grad_out.to(out.dtype))
    return out, x.grad, weight.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(
    "shape, groups, out_per_group",
    [((4, 7, 384), 3, 128), ((2, 5, 12), 4, 5), ((9, 8), 2, 4), ((3, 6, 10), 1, 7)],
)
def test_matches_the_definition_forward_and_backward(shape, groups, out_per_group, dtype):
    x, weight = make_inputs(shape, groups, out_per_group, dtype)
    actual = outputs_and_gradients(grouped_linear, x, weight)
    expected = outputs_and_gradients(definition, x.double(), weight.double())
    for name, got, want in zip(("out", "grad x", "grad weight"), actual, expected, strict=True):
        assert got.dtype == dtype and got.shape == want.shape, name
        assert_close_to_reference(got, want, dtype, scale=max(1.0, want.abs().max().item()))


def test_float64_gradients_pass_gradcheck():
    x, weight = make_inputs((2, 3, 6), 3, 2, torch.float64)
    assert torch.autograd.gradcheck(grouped_linear, (x.requires_grad_(), weight.requires_grad_()))


def test_strided_inputs_and_gradients_only_where_asked():
    """A slice in time and channel-last views read in place; a weight without grad gets none."""
    x, weight = make_inputs((2, 9, 8), 2, 3, torch.float64)
    sliced = x[:, 2:]  # not viewable as (N, C) rows: copied, still correct
    transposed = x.transpose(0, 1)
    for strided in (sliced, transposed):
        leaf = strided.detach().clone().requires_grad_()
        grouped_linear(leaf, weight).sum().backward()
        expected_leaf = strided.detach().clone().requires_grad_()
        definition(expected_leaf, weight).sum().backward()
        torch.testing.assert_close(grouped_linear(strided, weight), definition(strided, weight))
        torch.testing.assert_close(leaf.grad, expected_leaf.grad)
    assert weight.grad is None


def test_the_paths_give_the_same_results(monkeypatch):
    """Eager autograd (the Function), no autograd (its forward directly), autocast and traced
    calls (the einsum) agree; the Function runs only where autograd records the call."""
    x, weight = make_inputs((3, 4, 12), 3, 4, torch.float32)
    calls = []
    original_apply = _GroupedLinear.apply
    monkeypatch.setattr(_GroupedLinear, "apply", lambda *args: calls.append(1) or original_apply(*args))
    with torch.no_grad():
        plain = grouped_linear(x, weight)
    assert not calls
    recorded = grouped_linear(x, weight.requires_grad_())
    assert len(calls) == 1 and recorded.requires_grad
    torch.testing.assert_close(recorded.detach(), plain)
    compiled = torch.compile(grouped_linear, backend="eager", fullgraph=True)(x, weight.detach())
    torch.testing.assert_close(compiled, plain)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = grouped_linear(x, weight.detach())
    assert autocast.dtype == torch.bfloat16 and len(calls) == 1
    assert_close_to_reference(autocast, definition(x, weight.detach()), torch.bfloat16, scale=plain.abs().max().item())


def test_empty_rows():
    x, weight = make_inputs((0, 5, 6), 2, 4, torch.float32)
    out, grad_x, grad_weight = outputs_and_gradients(grouped_linear, x, weight)
    assert out.shape == (0, 5, 8) and grad_x.shape == x.shape
    assert torch.equal(grad_weight, torch.zeros_like(weight))


@pytest.mark.parametrize(
    "x_shape, weight_shape, message",
    [
        ((4, 6), (2, 3), r"weight must have shape \(G, O, I\)"),
        ((6,), (2, 3, 3), r"x must be a tensor of shape \(\.\.\., G \* I\) with at least 2 dims"),
        ((4, 7), (2, 3, 3), r"x must have G \* I = 2 \* 3 = 6 channels"),
    ],
)
def test_bad_shapes_are_named(x_shape, weight_shape, message):
    with pytest.raises(ValueError, match=message):
        grouped_linear(torch.randn(x_shape), torch.randn(weight_shape))


def test_mixed_dtypes_are_named():
    with pytest.raises(ValueError, match="weight has dtype torch.float64 but x has dtype torch.float32"):
        grouped_linear(torch.randn(4, 6), torch.randn(2, 3, 3, dtype=torch.float64))
