"""depthwise_conv against its float64 loop definition and F.conv1d: forward, backward, dtypes, the
input gate (ReLU and mask), edge cases, bad arguments, the custom op under torch.compile, and (on a
GPU) its CUDA kernel, which backend "auto" runs on CUDA tensors."""

import pytest
import torch
import torch.nn.functional as F

from talk_hf.ops import depthwise_conv
from talk_hf.ops.depthwise_conv.depthwise_compiled import compiled_depthwise_conv
from talk_hf.ops.depthwise_conv.depthwise_naive import naive_depthwise_conv

from .helpers import assert_close_to_reference, record_kernel_calls


def left_of(kernel_size, dilation, padding):
    """The steps before t that tap 0 reads (the op's ``left``)."""
    return (kernel_size - 1 if padding == "causal" else kernel_size // 2) * dilation


def make_inputs(batch, length, channels, kernel_size, dtype=torch.float64, device="cpu"):
    """Unit-scale x and a kernel of unit norm per channel (outputs of unit scale), made in float64."""
    x = torch.randn(batch, length, channels, dtype=torch.float64)
    weight = torch.randn(channels, kernel_size, dtype=torch.float64) / kernel_size**0.5
    return x.to(device, dtype), weight.to(device, dtype)


def outputs_and_gradients(op, x, weight):
    """op(x, weight) and the gradients of <out, g> for x and weight, g fixed and random."""
    x, weight = x.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    out = op(x, weight)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out.backward(grad_out.to(out.device, out.dtype))
    return out, x.grad, weight.grad


def assert_matches(actual, expected, dtype):
    """Output and gradients compared on each one's own scale (a weight gradient sums B*T terms)."""
    for name, got, want in zip(("out", "grad x", "grad weight"), actual, expected, strict=True):
        assert got.dtype == dtype, name
        assert_close_to_reference(got, want, dtype, scale=max(1.0, want.abs().max().item()))


def definition(dilation, padding):
    """The loop definition as an op of (x, weight): float64, differentiable."""
    return lambda x, weight: naive_depthwise_conv(x, weight, dilation, left_of(weight.shape[1], dilation, padding))


def conv1d_depthwise(dilation, padding):
    """The same convolution written directly with F.conv1d(groups=C) on explicitly padded input."""

    def op(x, weight):
        left = left_of(weight.shape[1], dilation, padding)
        right = (weight.shape[1] - 1) * dilation - left
        x_padded = F.pad(x.transpose(1, 2), (left, right))
        return F.conv1d(x_padded, weight.unsqueeze(1), dilation=dilation, groups=x.shape[2]).transpose(1, 2)

    return op


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("padding", ["causal", "centred"])
@pytest.mark.parametrize("dilation", [1, 2, 4])
@pytest.mark.parametrize(
    "batch,length,channels,kernel_size",
    [
        (2, 17, 5, 1),  # K = 1
        (2, 17, 21, 3),  # channels: two vectors of float32 lanes, then single channels
        (1, 40, 70, 31),  # eight vectors, then one, then singles; T shorter than the reach at dilation 2, 4
        (2, 9, 3, 63),  # T much shorter than the kernel
        (3, 1, 8, 31),  # T = 1
    ],
)
def test_forward_and_backward_match_definition(batch, length, channels, kernel_size, dilation, padding):
    x, weight = make_inputs(batch, length, channels, kernel_size)
    actual = outputs_and_gradients(lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding), x, weight)
    assert_matches(actual, outputs_and_gradients(definition(dilation, padding), x, weight), torch.float64)


def gated_definition(dilation, padding, relu, mask):
    """The definition of the convolution of the gated input: relu(x) (with ``relu``) with the rows
    where ``mask`` (B, T) is False zeroed (when given)."""

    def op(x, weight):
        u = torch.relu(x) if relu else x
        if mask is not None:
            u = u * mask.unsqueeze(-1).to(u.dtype)
        return definition(dilation, padding)(u, weight)

    return op


def padding_mask(batch, length):
    """A (B, T) bool mask with each row's last few positions False, and one row all False."""
    lengths = torch.tensor([length, max(length - 3, 1), 0, length // 2][:batch])
    return torch.arange(length) < lengths.unsqueeze(1)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("relu,masked", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("padding,kernel_size,dilation", [("causal", 31, 1), ("centred", 3, 2), ("centred", 63, 1)])
def test_gated_input_matches_definition(relu, masked, padding, kernel_size, dilation):
    """The ReLU and the mask applied inside the kernels, forward and both gradients (the gradient
    for x is zero where the ReLU cut or the mask zeroed), at a width with whole and partial vector blocks."""
    x, weight = make_inputs(4, 40, 70, kernel_size)
    mask = padding_mask(4, 40) if masked else None

    def op(x, w):
        return depthwise_conv(x, w, dilation=dilation, padding=padding, relu_input=relu, input_mask=mask)

    actual = outputs_and_gradients(op, x, weight)
    assert_matches(
        actual, outputs_and_gradients(gated_definition(dilation, padding, relu, mask), x, weight), torch.float64
    )


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gated_input_in_lower_precision(dtype):
    x, weight = make_inputs(2, 300, 384, 15, dtype)
    mask = padding_mask(2, 300)

    def op(backend):
        return lambda x, w: depthwise_conv(x, w, padding="centred", relu_input=True, input_mask=mask, backend=backend)

    actual = outputs_and_gradients(op(None), x, weight)
    assert_matches(actual, outputs_and_gradients(op("torch"), x.double(), weight.double()), dtype)


@pytest.mark.usefixtures("each_backend")
def test_gated_gradcheck_float64():
    x, weight = make_inputs(3, 8, 5, 3)
    mask = padding_mask(3, 8)
    assert torch.autograd.gradcheck(
        lambda x, w: depthwise_conv(x, w, padding="centred", relu_input=True, input_mask=mask),
        (x.requires_grad_(), weight.requires_grad_()),
    )


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("kernel_size", [2, 4])
def test_even_kernels_are_causal(kernel_size):
    x, weight = make_inputs(2, 11, 6, kernel_size)
    actual = outputs_and_gradients(lambda x, w: depthwise_conv(x, w, dilation=3), x, weight)
    assert_matches(actual, outputs_and_gradients(definition(3, "causal"), x, weight), torch.float64)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("padding", ["causal", "centred"])
@pytest.mark.parametrize("kernel_size,dilation", [(3, 1), (31, 1), (63, 2)])
def test_dtypes_match_float64_at_model_sizes(dtype, padding, kernel_size, dilation):
    """SliceNet's width (384 channels) over several time tiles of the C++ kernels, against the
    PyTorch path in float64 on the same (rounded) inputs (itself checked against the definition above)."""
    x, weight = make_inputs(2, 300, 384, kernel_size, dtype)

    def op(backend):
        return lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding, backend=backend)

    actual = outputs_and_gradients(op(None), x, weight)
    expected = outputs_and_gradients(op("torch"), x.double(), weight.double())
    assert actual[0].dtype == dtype
    assert_matches(actual, expected, dtype)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("padding", ["causal", "centred"])
@pytest.mark.parametrize("kernel_size,dilation", [(3, 1), (31, 2)])
def test_float32_matches_conv1d(padding, kernel_size, dilation):
    x, weight = make_inputs(4, 50, 40, kernel_size, torch.float32)
    actual = outputs_and_gradients(lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding), x, weight)
    assert_matches(actual, outputs_and_gradients(conv1d_depthwise(dilation, padding), x, weight), torch.float32)


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("padding,kernel_size,dilation", [("causal", 4, 2), ("centred", 5, 1), ("centred", 3, 3)])
def test_gradcheck_float64(padding, kernel_size, dilation):
    x, weight = make_inputs(2, 8, 5, kernel_size)
    assert torch.autograd.gradcheck(
        lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding),
        (x.requires_grad_(), weight.requires_grad_()),
    )


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("padding", ["causal", "centred"])
def test_non_contiguous_inputs(padding):
    x, weight = make_inputs(3, 12, 10, 5)
    x_strided = x.transpose(0, 1).contiguous().transpose(0, 1)
    weight_strided = weight.t().contiguous().t()
    assert not x_strided.is_contiguous() and not weight_strided.is_contiguous()

    def op(x, w):
        return depthwise_conv(x, w, dilation=2, padding=padding)

    torch.testing.assert_close(
        outputs_and_gradients(op, x_strided, weight_strided), outputs_and_gradients(op, x, weight)
    )


@pytest.mark.usefixtures("each_backend")
def test_causal_never_looks_ahead():
    x, weight = make_inputs(2, 20, 4, 6)
    out = depthwise_conv(x, weight, dilation=2)
    for t in (0, 7, 19):
        changed = x.clone()
        changed[:, t + 1 :] += 1.0
        torch.testing.assert_close(depthwise_conv(changed, weight, dilation=2)[:, : t + 1], out[:, : t + 1])


@pytest.mark.usefixtures("each_backend")
def test_empty_inputs_give_empty_outputs_and_zero_weight_gradients():
    for shape in ((2, 0, 8), (2, 5, 0), (0, 5, 8)):
        x = torch.randn(shape, requires_grad=True)
        weight = torch.randn(shape[2], 3, requires_grad=True)
        out = depthwise_conv(x, weight, padding="centred")
        assert out.shape == shape
        out.sum().backward()
        assert weight.grad is None or torch.equal(weight.grad, torch.zeros_like(weight))


x_ = torch.randn(2, 5, 8)
weight_ = torch.randn(8, 3)

BAD_CALLS = [
    (lambda: depthwise_conv(x_[0], weight_), ValueError, r"x must have shape \(B, T, C\)"),
    (lambda: depthwise_conv(x_, weight_[0]), ValueError, r"weight must have shape \(C, K\) \(2 dims\)"),
    (lambda: depthwise_conv(x_, torch.randn(4, 3)), ValueError, r"weight must have shape \(C, K\) with C=8"),
    (lambda: depthwise_conv(x_.long(), weight_), ValueError, "x must be float16, bfloat16, float32 or float64"),
    (lambda: depthwise_conv(x_, weight_.double()), ValueError, "weight has dtype torch.float64 but x has dtype"),
    (lambda: depthwise_conv(x_, weight_.to("meta")), ValueError, "weight is on meta but x is on cpu"),
    (lambda: depthwise_conv(x_, torch.randn(8, 4), padding="centred"), ValueError, "needs an odd kernel size K"),
    (lambda: depthwise_conv(x_, torch.randn(8, 65)), ValueError, r"kernel size K in \[1, 63\]"),
    (lambda: depthwise_conv(x_, torch.randn(8, 0)), ValueError, r"kernel size K in \[1, 63\]"),
    (lambda: depthwise_conv(x_, weight_, dilation=0), ValueError, "dilation must be >= 1, got 0"),
    (lambda: depthwise_conv(x_, weight_, dilation=2.0), TypeError, "dilation must be an int"),
    (
        lambda: depthwise_conv(x_, weight_, padding="same"),
        ValueError,
        r"padding must be one of \('causal', 'centred'\)",
    ),
    (lambda: depthwise_conv(x_, weight_, backend="gpu"), ValueError, "backend must be one of"),
    (lambda: depthwise_conv(x_, weight_, relu_input=1), TypeError, "relu_input must be a bool, got int"),
    (
        lambda: depthwise_conv(x_, weight_, input_mask=torch.ones(2, 5)),
        ValueError,
        r"input_mask must be a bool tensor of shape \(B, T\), got torch.float32",
    ),
    (
        lambda: depthwise_conv(x_, weight_, input_mask=torch.ones(2, 6, dtype=torch.bool)),
        ValueError,
        r"input_mask must have shape \(B, T\) = \(2, 5\) \(x's first two dims\), got shape \(2, 6\)",
    ),
    (
        lambda: depthwise_conv(x_, weight_, input_mask=torch.ones(2, 5, dtype=torch.bool, device="meta")),
        ValueError,
        "input_mask is on meta but x is on cpu",
    ),
]


@pytest.mark.parametrize("call,error,message", BAD_CALLS, ids=[case[2][:40] for case in BAD_CALLS])
def test_bad_arguments_raise_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# --- The custom op ------------------------------------------------------------------------------


def test_custom_op_passes_opcheck():
    """Schema, fake (meta) kernel and autograd registration agree with the real kernels."""
    x, weight = make_inputs(2, 9, 6, 3)
    x.requires_grad_()
    weight.requires_grad_()
    torch.library.opcheck(compiled_depthwise_conv.custom_op, (x, weight, None, 2, 4, False))
    torch.library.opcheck(compiled_depthwise_conv.custom_op, (x, weight, padding_mask(2, 9), 2, 4, True))


def test_torch_compile_traces_through_the_kernel():
    x, weight = make_inputs(2, 9, 6, 5, torch.float32)
    x.requires_grad_()
    weight.requires_grad_()

    mask = padding_mask(2, 9)

    def mix(x, weight):
        centred = depthwise_conv(x, weight, padding="centred", backend="cpu")
        gated = depthwise_conv(x, weight, relu_input=True, input_mask=mask, backend="cpu")
        return centred + depthwise_conv(x, weight, dilation=2, backend="cpu") + gated

    compiled = torch.compile(mix, backend="aot_eager", fullgraph=True)
    out = compiled(x, weight)
    torch.testing.assert_close(out, mix(x, weight))
    grads = torch.autograd.grad(out.sum(), (x, weight))
    for grad, reference in zip(grads, torch.autograd.grad(mix(x, weight).sum(), (x, weight)), strict=True):
        torch.testing.assert_close(grad, reference)


# --- CUDA (run where a GPU is present) -----------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("padding", ["causal", "centred"])
@pytest.mark.parametrize(
    "batch,length,channels,kernel_size,dilation",
    [
        (2, 1, 8, 3, 1),  # T = 1
        (128, 32, 384, 31, 1),  # SliceNet's training shape
        (2, 300, 70, 63, 2),  # several tiles, a partial block of channels
        (1, 20_000, 33, 5, 4),  # long
        (3, 9, 5, 63, 4),  # T much shorter than the reach
    ],
)
def test_cuda_matches_definition(dtype, padding, batch, length, channels, kernel_size, dilation):
    x, weight = make_inputs(batch, length, channels, kernel_size, dtype, "cuda")
    actual = outputs_and_gradients(
        lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding, backend="cuda"), x, weight
    )
    expected = outputs_and_gradients(
        lambda x, w: depthwise_conv(x, w, dilation=dilation, padding=padding, backend="torch"),
        x.double(),
        weight.double(),
    )
    assert actual[0].device.type == "cuda"
    assert_matches(actual, expected, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("relu,masked", [(True, True), (True, False), (False, True)])
def test_cuda_gated_input_matches_the_pytorch_path(dtype, relu, masked):
    x, weight = make_inputs(64, 40, 384, 15, dtype, "cuda")
    mask = padding_mask(4, 40).repeat(16, 1).cuda() if masked else None

    def op(backend):
        return lambda x, w: depthwise_conv(x, w, padding="centred", relu_input=relu, input_mask=mask, backend=backend)

    actual = outputs_and_gradients(op("cuda"), x, weight)
    assert_matches(actual, outputs_and_gradients(op("torch"), x.double(), weight.double()), dtype)


@pytest.mark.gpu
def test_cuda_gradcheck_float64_and_auto_runs_the_kernel(monkeypatch):
    x, weight = make_inputs(2, 8, 5, 5, torch.float64, "cuda")
    assert torch.autograd.gradcheck(
        lambda x, w: depthwise_conv(x, w, dilation=2, padding="centred", backend="cuda"),
        (x.requires_grad_(), weight.requires_grad_()),
    )
    calls = record_kernel_calls(monkeypatch)
    out = depthwise_conv(x.detach(), weight.detach(), backend="auto")
    assert calls == [("depthwise_conv", "cuda", "forward")]
    small_x, small_weight = x.detach().cpu(), weight.detach().cpu()
    assert_close_to_reference(out.cpu(), naive_depthwise_conv(small_x, small_weight, 1, 4), torch.float64)
