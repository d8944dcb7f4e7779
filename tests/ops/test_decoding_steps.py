"""talk_conv_step and dynamic_conv_step, the causal ops' one-token step forms, against their ops'
definitions at the last row of the context: windows off the grid, exactly on it, and reaching past
the context's first row; every float dtype; float64 gradients of the TaLK step; the errors of bad arguments."""

import pytest
import torch

from talk_hf.ops import dynamic_conv_step, talk_conv, talk_conv_step
from talk_hf.ops.dynamic_conv.dynamic_naive import naive_dynamic_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv

from .helpers import assert_close_to_reference, offsets_off_the_grid

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]


def _last_row_offsets(last: torch.Tensor, rows: int) -> torch.Tensor:
    """(B, 1, H) offsets of the last token -> (B, rows, H), the earlier rows' arbitrary (their outputs
    are not compared)."""
    return torch.cat([torch.rand(last.shape[0], rows - 1, last.shape[2], dtype=last.dtype), last], dim=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rows,channels,heads,max_left,offsets",
    [
        (6, 8, 2, 5, "off_grid"),  # the cache's context: max_left + 1 rows
        (6, 8, 4, 5, "on_grid"),  # whole-token reaches, 0 and 1 included
        (3, 6, 3, 7, "off_grid"),  # windows reach past the context's first row
        (4, 4, 1, 0, "off_grid"),  # max_left = 0: the token alone, over 1
    ],
)
def test_talk_step_equals_the_last_row_of_talk_conv(dtype, rows, channels, heads, max_left, offsets):
    generator = torch.Generator().manual_seed(rows * 7 + heads)
    context = torch.randn(3, rows, channels, dtype=torch.float64, generator=generator)
    if offsets == "off_grid":
        last = offsets_off_the_grid((3, 1, heads), max_left, generator=generator)
    else:
        last = torch.randint(0, max_left + 1, (3, 1, heads), generator=generator).double() / max_left
        last[0, 0] = torch.tensor([0.0, 1.0, 1.0, 0.0])
    expected = naive_talk_conv(context, _last_row_offsets(last, rows), None, max_left, 0)[:, -1:]
    out = talk_conv_step(context.to(dtype), last.to(dtype), max_left)
    assert out.shape == (3, 1, channels) and out.dtype == dtype
    assert_close_to_reference(out, expected, dtype, scale=2.0)


@pytest.mark.parametrize("rows,max_left", [(6, 5), (3, 7)])  # the cache's context; windows past its first row
def test_talk_step_gradients_equal_those_of_the_last_row_of_talk_conv(rows, max_left):
    """float64 gradients of the step (context and offsets) against those of talk_conv's last row (the
    sequence form, gradchecked against finite differences in test_talk_conv), and gradcheck."""
    generator = torch.Generator().manual_seed(rows + max_left)
    context = torch.randn(2, rows, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    last = offsets_off_the_grid((2, 1, 3), max_left, generator=generator).requires_grad_()
    expected = talk_conv(context, _last_row_offsets(last, rows), None, max_left, 0)[:, -1:]
    out = talk_conv_step(context, last, max_left)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (context, last), grad_out)
    expected_grads = torch.autograd.grad(expected, (context, last), grad_out)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_close_to_reference(grad, expected_grad, torch.float64)
    assert torch.autograd.gradcheck(lambda x, offsets: talk_conv_step(x, offsets, max_left), (context, last))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel_size,channels,heads", [(4, 8, 2), (1, 6, 3), (9, 4, 4)])
def test_dynamic_step_equals_the_last_row_of_dynamic_conv(dtype, kernel_size, channels, heads):
    generator = torch.Generator().manual_seed(kernel_size)
    context = torch.randn(2, kernel_size, channels, dtype=torch.float64, generator=generator)
    weight = torch.softmax(
        torch.randn(2, kernel_size, heads, kernel_size, generator=generator, dtype=torch.float64), -1
    )
    expected = naive_dynamic_conv(context, weight, kernel_size - 1)[:, -1:]
    out = dynamic_conv_step(context.to(dtype), weight[:, -1].to(dtype))
    assert out.shape == (2, 1, channels) and out.dtype == dtype
    assert_close_to_reference(out, expected, dtype, scale=2.0)


def test_a_kernel_of_one_row_serves_every_row_as_light_conv():
    """LightConv's step: one (1, H, K) kernel for a batch of contexts, as light_conv's last row."""
    generator = torch.Generator().manual_seed(5)
    context = torch.randn(3, 4, 6, dtype=torch.float64, generator=generator)
    weight = torch.softmax(torch.randn(3, 4, dtype=torch.float64, generator=generator), -1)
    expected = naive_dynamic_conv(context, weight, 3)[:, -1:]
    assert_close_to_reference(dynamic_conv_step(context, weight.unsqueeze(0)), expected, torch.float64)


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda: talk_conv_step(torch.zeros(2, 4, 6), torch.zeros(2, 2, 3), 3),
            ValueError,
            r"offset_left must have shape \(B, 1, H\)",
        ),
        (
            lambda: talk_conv_step(torch.zeros(2, 4, 6), torch.zeros(2, 1, 4), 3),
            ValueError,
            "divisible by the number of heads",
        ),
        (lambda: talk_conv_step(torch.zeros(2, 4, 6), torch.zeros(2, 1, 3), -1), ValueError, "max_left"),
        (
            lambda: talk_conv_step(torch.zeros(4, 6), torch.zeros(2, 1, 3), 3),
            ValueError,
            r"context must have shape \(B, K, C\)",
        ),
        (
            lambda: dynamic_conv_step(torch.zeros(2, 4, 6), torch.zeros(2, 3, 5)),
            ValueError,
            r"weight must have shape \(B, H, K\) or \(1, H, K\) with B = 2 and K = 4",
        ),
        (
            lambda: dynamic_conv_step(torch.zeros(2, 4, 6), torch.zeros(3, 3, 4)),
            ValueError,
            r"\(1, H, K\) with B = 2 and K = 4 for a context of shape \(2, 4, 6\), got \(3, 3, 4\)",
        ),
        (lambda: dynamic_conv_step(torch.zeros(2, 4, 6), torch.zeros(2, 3, 4).double()), ValueError, "dtype"),
    ],
    ids=["talk-rows", "talk-heads", "talk-reach", "talk-rank", "dynamic-taps", "dynamic-rows", "dynamic-dtype"],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()
