"""dynamic_conv and light_conv against their definition: forward, backward, dtypes, properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from talk_hf.ops import dynamic_conv, light_conv, talk_conv
from talk_hf.ops.dynamic_conv.dynamic_naive import naive_dynamic_conv

from .helpers import assert_close_to_reference

pytestmark = pytest.mark.usefixtures("each_backend")

OPS = {"dynamic": dynamic_conv, "light": light_conv}


def make_inputs(kind, batch, length, channels, heads, kernel_size, dtype=torch.float64):
    x = torch.randn(batch, length, channels, dtype=dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), dim=-1).to(dtype)
    return x, weight


@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize(
    "batch,length,channels,heads,kernel_size,padding_l",
    [
        (2, 15, 8, 2, 3, 2),  # odd K, causal
        (2, 15, 8, 2, 3, 1),  # odd K, centred
        (2, 15, 8, 4, 4, 3),  # even K, causal
        (2, 15, 8, 4, 4, 2),  # even K, centred
        (1, 1, 4, 1, 5, 2),  # T = 1, B*H = 1
        (1, 6, 6, 3, 31, 15),  # kernel much longer than T
        (2, 9, 3, 1, 1, 0),  # K = 1
        (1, 9, 4, 2, 5, 0),  # looks only ahead
    ],
)
def test_forward_matches_definition(kind, batch, length, channels, heads, kernel_size, padding_l):
    x, weight = make_inputs(kind, batch, length, channels, heads, kernel_size)
    out = OPS[kind](x, weight, padding_l)
    assert_close_to_reference(out, naive_dynamic_conv(x, weight, padding_l), torch.float64)


@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize("kernel_size,padding_l", [(3, 1), (4, 3), (1, 0)])
def test_gradcheck_float64(kind, kernel_size, padding_l):
    x, weight = make_inputs(kind, 2, 7, 6, 3, kernel_size)
    assert torch.autograd.gradcheck(
        lambda x, weight: OPS[kind](x, weight, padding_l), (x.requires_grad_(), weight.requires_grad_())
    )


@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_forward_and_backward(kind, dtype):
    x, weight = make_inputs(kind, 2, 33, 16, 4, 7, dtype)
    low = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
    high = [t.detach().double().requires_grad_() for t in low]
    out_low, out_high = OPS[kind](*low, 3), OPS[kind](*high, 3)
    assert out_low.dtype == dtype
    assert_close_to_reference(out_low, out_high, dtype)
    grad_out = torch.randn_like(out_high)
    out_low.backward(grad_out.to(dtype))
    out_high.backward(grad_out)
    assert_close_to_reference(low[0].grad, high[0].grad, dtype)
    # Weight gradients sum over the head's channels (and over time for light_conv).
    weight_scale = 4.0 if kind == "dynamic" else 4.0 * 33 * 2
    assert_close_to_reference(low[1].grad, high[1].grad, dtype, scale=weight_scale)


@pytest.mark.parametrize("kind", ["dynamic", "light"])
def test_non_contiguous_inputs(kind):
    x, weight = make_inputs(kind, 3, 12, 8, 2, 5)
    x_strided = x.transpose(0, 1).contiguous().transpose(0, 1)
    weight_strided = weight.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not x_strided.is_contiguous() and not weight_strided.is_contiguous()
    torch.testing.assert_close(OPS[kind](x_strided, weight_strided, 2), OPS[kind](x, weight, 2))


@pytest.mark.parametrize("kind", ["dynamic", "light"])
def test_causal_never_looks_ahead(kind):
    kernel_size = 6
    x, weight = make_inputs(kind, 2, 20, 4, 2, kernel_size)
    out = OPS[kind](x, weight, kernel_size - 1)
    for t in (0, 7, 19):
        changed = x.clone()
        changed[:, t + 1 :] += 1.0
        torch.testing.assert_close(OPS[kind](changed, weight, kernel_size - 1)[:, : t + 1], out[:, : t + 1])


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(["dynamic", "light"]),
    batch=st.integers(1, 2),
    length=st.integers(1, 20),
    heads=st.integers(1, 3),
    head_size=st.integers(1, 3),
    kernel_size=st.integers(1, 12),
    data=st.data(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_property_random_shapes(kind, batch, length, heads, head_size, kernel_size, data, dtype):
    padding_l = data.draw(st.integers(0, kernel_size - 1), label="padding_l")
    x, weight = make_inputs(kind, batch, length, heads * head_size, heads, kernel_size, dtype)
    out = OPS[kind](x, weight, padding_l)
    assert out.shape == x.shape and out.dtype == dtype
    assert_close_to_reference(out, naive_dynamic_conv(x, weight, padding_l), dtype)


def test_empty_sequences_give_empty_outputs():
    x = torch.randn(2, 0, 8)
    assert dynamic_conv(x, torch.rand(2, 0, 2, 3), 1).shape == (2, 0, 8)
    assert light_conv(x, torch.rand(2, 3), 1).shape == (2, 0, 8)
    assert talk_conv(x, torch.rand(2, 0, 2), torch.rand(2, 0, 2), 3, 3).shape == (2, 0, 8)
