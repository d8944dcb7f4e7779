"""Integer arguments far beyond a sequence's length: a correct result where the math is defined,
an error naming the argument where the kernels cannot take the value (never an error from the
C++ binding or an allocator)."""

import pytest
import torch

from talk_hf.ops import depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops._validation import MAX_REACH
from talk_hf.ops.depthwise_conv.depthwise_naive import naive_depthwise_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv


def _talk_inputs():
    """float64 x (2, 6, 4) and offsets (2, 6, 2) with windows of 0, 3.5 tokens and ones clamped at
    the first token when scaled by MAX_REACH."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 4, dtype=torch.float64, generator=generator)
    reach = torch.tensor([0.0, 3.5, 1e9, 0.0, 2.25, 5e8], dtype=torch.float64)
    offsets = (reach / MAX_REACH).view(1, 6, 1).expand(2, 6, 2).contiguous()
    return x, offsets


@pytest.mark.parametrize("max_right", [0, MAX_REACH])
def test_talk_conv_at_the_largest_reach_matches_the_definition(each_backend, max_right):
    x, offset_left = _talk_inputs()
    offset_right = None if max_right == 0 else offset_left.flip(1)
    x.requires_grad_()
    offset_left.requires_grad_()
    out = talk_conv(x, offset_left, offset_right, MAX_REACH, max_right)
    normalizer = MAX_REACH + max_right + 1  # compare window sums, not sums divided by 2**31 or 2**32
    expected = naive_talk_conv(x.detach(), offset_left.detach(), offset_right, MAX_REACH, max_right)
    torch.testing.assert_close(out * normalizer, expected * normalizer, atol=1e-9, rtol=1e-9)
    grad_x, grad_offsets = torch.autograd.grad(out.sum(), (x, offset_left))
    assert torch.isfinite(grad_x).all() and torch.isfinite(grad_offsets).all()


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("argument", ["max_left", "max_right"])
@pytest.mark.parametrize("value", [MAX_REACH + 1, 2**64])
def test_talk_conv_reach_beyond_the_kernels_index_range_names_the_argument(backend, argument, value):
    x, offsets = _talk_inputs()
    reaches = {"max_left": 3, "max_right": 3, argument: value}
    with pytest.raises(ValueError, match=f"{argument} must be <= {MAX_REACH}, got {value}"):
        talk_conv(x, offsets, offsets, reaches["max_left"], reaches["max_right"], backend=backend)


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_dynamic_and_light_conv_padding_beyond_the_kernel_names_the_argument(backend):
    x = torch.randn(1, 4, 4)
    with pytest.raises(ValueError, match=f"padding_l must be <= 2, got {2**64}"):
        dynamic_conv(x, torch.rand(1, 4, 2, 3), 2**64, backend=backend)
    with pytest.raises(ValueError, match=f"padding_l must be <= 2, got {2**64}"):
        light_conv(x, torch.rand(2, 3), 2**64, backend=backend)


@pytest.mark.parametrize("padding", ["causal", "centred"])
@pytest.mark.parametrize("dilation", [3, 5, 6, 10**9, 2**64])
def test_depthwise_conv_with_a_dilation_beyond_the_length_matches_the_definition(each_backend, padding, dilation):
    """T = 5: from dilation 5 on only the tap at t itself reads inside [0, T); 10**9 would make the
    PyTorch path pad x with 62 * 10**9 zeros per row, 2**64 overflows the C++ binding's int64."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = torch.randn(3, 63, dtype=torch.float64, generator=generator, requires_grad=True)
    left = (62 if padding == "causal" else 31) * dilation
    out = depthwise_conv(x, weight, dilation=dilation, padding=padding, relu_input=True)
    expected = naive_depthwise_conv(torch.relu(x), weight, dilation, left)
    torch.testing.assert_close(out, expected)
    grad_out = torch.randn(out.shape, dtype=torch.float64, generator=generator)
    grads = torch.autograd.grad(out, (x, weight), grad_out)
    expected_grads = torch.autograd.grad(expected, (x, weight), grad_out)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)
