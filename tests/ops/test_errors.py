"""Bad arguments raise errors that name the argument and what was expected."""

import pytest
import torch

from talk_hf.ops import dynamic_conv, light_conv, talk_conv

x = torch.randn(2, 5, 8)
offsets = torch.rand(2, 5, 2)
dyn_weight = torch.rand(2, 5, 2, 3)
light_weight = torch.rand(2, 3)

CASES = [
    # talk_conv
    (lambda: talk_conv(x[0], offsets, offsets, 2, 2), ValueError, r"x must have shape \(B, T, C\)"),
    (
        lambda: talk_conv(x.long(), offsets, offsets, 2, 2),
        ValueError,
        "x must be float16, bfloat16, float32 or float64",
    ),
    (lambda: talk_conv(x.numpy(), offsets, offsets, 2, 2), TypeError, "x must be a torch.Tensor"),
    (lambda: talk_conv(x, offsets[:, :4], offsets, 2, 2), ValueError, "offset_left must match x in its first 2 dims"),
    (lambda: talk_conv(x, torch.rand(2, 5, 3), None, 2, 0), ValueError, "divisible by the number of heads H=3"),
    (lambda: talk_conv(x, torch.rand(2, 5, 0), None, 2, 0), ValueError, "at least one head"),
    (lambda: talk_conv(x, offsets, offsets, -1, 2), ValueError, "max_left must be >= 0, got -1"),
    (lambda: talk_conv(x, offsets, offsets, 2, -2), ValueError, "max_right must be >= 0, got -2"),
    (lambda: talk_conv(x, offsets, offsets, 2.5, 2), TypeError, "max_left must be an int"),
    (lambda: talk_conv(x, offsets, offsets, 2, 0), ValueError, "offset_right must be None when max_right == 0"),
    (lambda: talk_conv(x, offsets, None, 2, 3), ValueError, "offset_right of shape .* is required when max_right=3"),
    (
        lambda: talk_conv(x, offsets, offsets[..., :1], 2, 3),
        ValueError,
        "offset_right must have the shape of offset_left",
    ),
    (
        lambda: talk_conv(x, offsets.double(), None, 2, 0),
        ValueError,
        "offset_left has dtype torch.float64 but x has dtype torch.float32",
    ),
    (lambda: talk_conv(x, offsets, offsets.half(), 2, 2), ValueError, "offset_right has dtype torch.float16"),
    (lambda: talk_conv(x, offsets.to("meta"), None, 2, 0), ValueError, "offset_left is on meta but x is on cpu"),
    # Offset values: only the PyTorch path checks them (the kernels read any value safely).
    (lambda: talk_conv(x, -offsets, None, 2, 0, backend="torch"), ValueError, "offset_left must be >= 0"),
    (lambda: talk_conv(x, offsets * float("nan"), None, 2, 0, backend="torch"), ValueError, "offset_left contains NaN"),
    (
        lambda: talk_conv(x, offsets, offsets * float("inf"), 2, 1, backend="torch"),
        ValueError,
        "offset_right contains NaN or infinite",
    ),
    (lambda: talk_conv(x, offsets, None, 2, 0, backend="triton"), ValueError, "backend must be one of"),
    # dynamic_conv
    (lambda: dynamic_conv(x, dyn_weight[0], 1), ValueError, r"weight must have shape \(B, T, H, K\)"),
    (lambda: dynamic_conv(x, dyn_weight[:, :3], 1), ValueError, "weight must match x in its first 2 dims"),
    (lambda: dynamic_conv(x, torch.rand(2, 5, 3, 3), 1), ValueError, "divisible by the number of heads H=3"),
    (lambda: dynamic_conv(x, torch.rand(2, 5, 2, 0), 0), ValueError, "kernel size K >= 1"),
    (lambda: dynamic_conv(x, dyn_weight, 3), ValueError, "padding_l must be <= 2, got 3"),
    (lambda: dynamic_conv(x, dyn_weight, -1), ValueError, "padding_l must be >= 0, got -1"),
    (lambda: dynamic_conv(x, dyn_weight, True), TypeError, "padding_l must be an int"),
    (lambda: dynamic_conv(x, dyn_weight.bfloat16(), 1), ValueError, "weight has dtype torch.bfloat16"),
    (lambda: dynamic_conv(x, dyn_weight, 1, backend="cuda!"), ValueError, "backend must be one of"),
    # light_conv
    (lambda: light_conv(x, dyn_weight, 1), ValueError, r"weight must have shape \(H, K\)"),
    (lambda: light_conv(x, torch.rand(3, 3), 1), ValueError, "divisible by the number of heads H=3"),
    (lambda: light_conv(x, torch.rand(2, 0), 0), ValueError, "kernel size K >= 1"),
    (lambda: light_conv(x, light_weight, 5), ValueError, "padding_l must be <= 2, got 5"),
    (
        lambda: light_conv(x.half(), light_weight, 1),
        ValueError,
        "weight has dtype torch.float32 but x has dtype torch.float16",
    ),
]


@pytest.mark.parametrize("call,error,message", CASES, ids=[case[2][:40] for case in CASES])
def test_bad_arguments_raise_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
