"""The compiled kernels: any offset value is safe, the custom ops are well formed, and (on a CUDA
machine) the CUDA kernels match the reference in every dtype, forward and backward.

The CPU tests run the C++ kernels (backend="cpu"), which share their per-element math with the
CUDA kernels (csrc/talk_math.h); tests marked ``gpu`` run only where CUDA is available.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

from talk_hf.ops import _compiled_op, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops._extension import BackendFallbackWarning
from talk_hf.ops.depthwise_conv.depthwise_compiled import compiled_depthwise_conv
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.dynamic_conv.dynamic_naive import naive_dynamic_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv

from .helpers import TOLERANCES, assert_close_to_reference, compare_with_reference, offsets_off_the_grid


def signed_window_talk_conv(x, offset_left, offset_right, max_left, max_right):
    """float64 ``(F(u_b) - F(u_a)) / K`` from one global prefix sum, for any offset values.

    The kernels' contract (csrc/talk_math.h): edges clamped into [0, T - 1], a NaN edge at 0, a
    negative offset giving the signed integral of the reversed window.
    """
    x = x.double()
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    time = torch.arange(length, dtype=torch.float64).view(1, length, 1)

    def clamp(position):
        return torch.nan_to_num(position, nan=0.0).clamp(0, length - 1)

    left = clamp(time - offset_left.double() * max_left)
    right = time + 1.0 if offset_right is None else clamp(time + offset_right.double() * max_right) + 1
    right = right.expand(batch, length, heads)
    prefix = F.pad(x.cumsum(1), (0, 0, 1, 1))  # P[0 .. T], then P[T + 1] = P[T] so x[T] = 0
    steps = prefix[:, 1:] - prefix[:, :-1]  # x[0 .. T]

    def integral(position):  # F(u), gathered per channel from the head's edge
        index = position.floor().long().repeat_interleave(channels // heads, dim=2)
        fraction = (position - position.floor()).repeat_interleave(channels // heads, dim=2)
        return prefix.gather(1, index) + fraction * steps.gather(1, index)

    return (integral(right) - integral(left)) / (max_left + max_right + 1)


def test_signed_window_formula_is_the_definition_for_valid_offsets():
    x = torch.randn(2, 15, 6, dtype=torch.float64)
    offset_left, offset_right = torch.rand(2, 15, 3, dtype=torch.float64), torch.rand(2, 15, 3, dtype=torch.float64)
    for right, max_right in ((offset_right, 4), (None, 0)):
        torch.testing.assert_close(
            signed_window_talk_conv(x, 1.3 * offset_left, right, 5, max_right),
            naive_talk_conv(x, 1.3 * offset_left, right, 5, max_right),
        )


@pytest.mark.parametrize("values", ["negative", "huge", "infinite", "nan"])
@pytest.mark.parametrize("max_right", [0, 3])
def test_any_offset_value_is_safe(values, max_right):
    """No value makes a kernel read out of bounds; the result follows the signed-window formula."""
    x = torch.randn(2, 37, 6, dtype=torch.float64, requires_grad=True)
    offsets = torch.randn(2, 37, 3, dtype=torch.float64) * 3
    offsets = {
        "negative": -offsets.abs(),
        "huge": offsets.abs() * 1e6,
        "infinite": torch.full_like(offsets, float("inf")).where(offsets > 0, -float("inf")),
        "nan": torch.where(offsets > 0, float("nan"), offsets),
    }[values].requires_grad_()
    offset_right = offsets.flip(1) if max_right else None
    out = talk_conv(x, offsets, offset_right, 4, max_right, backend="cpu")
    expected = signed_window_talk_conv(x.detach(), offsets.detach(), offset_right, 4, max_right)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(offsets.grad).all()


@pytest.mark.parametrize("max_right", [0, 3])
def test_reversed_windows_have_the_gradient_of_the_signed_formula(max_right):
    x = torch.randn(1, 12, 4, dtype=torch.float64, requires_grad=True)
    offsets = (-offsets_off_the_grid((1, 12, 2), 4)).requires_grad_()
    offset_right = offsets_off_the_grid((1, 12, 2), 3).requires_grad_() if max_right else None
    inputs = [x, offsets] + ([offset_right] if max_right else [])
    assert torch.autograd.gradcheck(
        lambda x, left, right=None: talk_conv(x, left, right, 4, max_right, backend="cpu"), inputs
    )


def outputs_and_gradients(op, inputs, backend, dtype):
    """op(*inputs) in ``dtype`` on ``backend`` and the gradients of <out, g> for a fixed random g."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
    out = op(*leaves, backend=backend)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype))
    return [out] + [t.grad for t in leaves]


# Heads as wide as a model's (whole vectors of the CPU kernels' inner loops and, at 40, a
# partial one) over several tiles of time (128 steps each).
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("head_size", [40, 64])
@pytest.mark.parametrize("max_right", [0, 31])
def test_cpu_talk_kernels_match_reference_at_model_sizes(dtype, head_size, max_right):
    x = torch.randn(2, 300, 3 * head_size, dtype=torch.float64)
    inputs = [x, offsets_off_the_grid((2, 300, 3), 31)] + (
        [offsets_off_the_grid((2, 300, 3), max_right)] if max_right else []
    )

    def op(x, left, right=None, backend=None):
        return talk_conv(x, left, right, 31, max_right, backend=backend)

    expected = outputs_and_gradients(op, inputs, "torch", torch.float64)
    for actual, reference in zip(outputs_and_gradients(op, inputs, "cpu", dtype), expected, strict=True):
        assert_close_to_reference(actual, reference, dtype, scale=head_size)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize("taps,padding_l", [(31, 15), (31, 30), (13, 6), (17, 16)])
def test_cpu_conv_kernels_match_reference_at_model_sizes(dtype, kind, taps, padding_l):
    # 87 channels a head: a block of eight vector registers, blocks of two and single channels
    # (the three channel loops), and an odd channel count.  The taps' weight gradients take 2, 3 or
    # 4 vector registers of taps in float32 (13, 17, 31 taps) and the general path for more.
    heads, head_size = 3, 87
    x = torch.randn(2, 300, heads * head_size, dtype=torch.float64)
    shape = (2, 300, heads, taps) if kind == "dynamic" else (heads, taps)
    weight = torch.softmax(torch.randn(shape, dtype=torch.float64), -1)
    conv = dynamic_conv if kind == "dynamic" else light_conv

    def op(x, weight, backend=None):
        return conv(x, weight, padding_l, backend=backend)

    expected = outputs_and_gradients(op, [x, weight], "torch", torch.float64)
    for actual, reference in zip(outputs_and_gradients(op, [x, weight], "cpu", dtype), expected, strict=True):
        assert_close_to_reference(actual, reference, dtype, scale=taps if kind == "dynamic" else 600 * taps)


def test_cpu_talk_kernels_split_the_heads_of_windows_that_reach_far():
    """Windows spanning most of the sequence: the forward sums the heads' prefixes in groups
    (a tile's buffer would otherwise hold T rows of every channel); results stay exact."""
    x = torch.randn(1, 1100, 4 * 64, dtype=torch.float64)
    inputs = [
        x,
        0.5 + 0.5 * torch.rand(1, 1100, 4, dtype=torch.float64),
        0.5 + 0.5 * torch.rand(1, 1100, 4, dtype=torch.float64),
    ]

    def op(x, left, right, backend=None):
        return talk_conv(x, left, right, 1000, 1000, backend=backend)

    expected = outputs_and_gradients(op, inputs, "torch", torch.float64)
    for actual, reference in zip(outputs_and_gradients(op, inputs, "cpu", torch.float64), expected, strict=True):
        assert_close_to_reference(actual, reference, torch.float64, scale=1000)


def small_inputs(dtype=torch.float64, requires_grad=False):
    x = torch.randn(2, 9, 6, dtype=dtype, requires_grad=requires_grad)
    offsets = torch.rand(2, 9, 3, dtype=dtype, requires_grad=requires_grad)
    weight = torch.softmax(torch.randn(2, 9, 3, 4, dtype=dtype), -1).requires_grad_(requires_grad)
    return x, offsets, weight


@pytest.mark.parametrize("op", ["talk_bidirectional", "talk_causal", "dynamic", "light"])
def test_custom_ops_pass_opcheck(op):
    """Schema, fake (meta) kernel and autograd registration agree with the real kernels."""
    x, offsets, weight = small_inputs(requires_grad=True)
    args = {
        "talk_bidirectional": (
            compiled_talk_conv.custom_op,
            (x, offsets, offsets.detach().flip(1).requires_grad_(), 3, 2),
        ),
        "talk_causal": (compiled_talk_conv.custom_op, (x, offsets, None, 3, 0)),
        "dynamic": (compiled_dynamic_conv.custom_op, (x, weight, 2)),
        "light": (compiled_light_conv.custom_op, (x, weight[0, 0].detach().requires_grad_(), 1)),
    }[op]
    torch.library.opcheck(*args)


OPS_AND_CUSTOM_OPS = {
    "talk": (lambda x, offsets, weight: talk_conv(x, offsets, None, 3, 0, backend="cpu"), "talk_conv"),
    "dynamic": (lambda x, offsets, weight: dynamic_conv(x, weight, 2, backend="cpu"), "dynamic_conv"),
    "light": (lambda x, offsets, weight: light_conv(x, weight[0, 0], 1, backend="cpu"), "light_conv"),
    "depthwise": (lambda x, offsets, weight: depthwise_conv(x, weight[0, :6, 0], backend="cpu"), "depthwise_conv"),
}
COMPILED_OPS = (compiled_talk_conv, compiled_dynamic_conv, compiled_light_conv, compiled_depthwise_conv)


def outputs_and_input_gradients(call, inputs, grad_out):
    out = call(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_out, allow_unused=True)
    return [out] + [grad for grad in grads if grad is not None]


@pytest.mark.parametrize("op", sorted(OPS_AND_CUSTOM_OPS))
def test_eager_calls_skip_the_custom_op_and_give_its_results(op, monkeypatch):
    """Eager calls never go through the custom ops (whose Python dispatch is slow): with autograd an
    ``autograd.Function`` with the same formula runs, without it the extension; outputs and gradients
    equal the custom op's bit for bit.  (Tracing goes through the custom op: the torch.compile tests.)"""
    call, custom_op_name = OPS_AND_CUSTOM_OPS[op]
    inputs = small_inputs(torch.float32)
    grad_inputs = tuple(tensor.clone().requires_grad_() for tensor in inputs)
    grad_out = torch.randn_like(inputs[0])
    with monkeypatch.context() as patch:
        patch.setattr(_compiled_op, "needs_custom_op", lambda *tensors: True)
        through_custom_op = outputs_and_input_gradients(call, grad_inputs, grad_out)
    assert through_custom_op[0].grad_fn.name().startswith("GeneratedBackwardFor_talk_hf_" + custom_op_name)
    with monkeypatch.context() as patch:

        def refuse(*args):
            raise AssertionError("went through a custom op")

        for compiled_op in COMPILED_OPS:
            patch.setattr(compiled_op, "custom_op", refuse)
            patch.setattr(compiled_op, "backward_op", refuse)
        eager = outputs_and_input_gradients(call, grad_inputs, grad_out)
        assert "talk_hf" not in eager[0].grad_fn.name()
        for actual, expected in zip(eager, through_custom_op, strict=True):
            torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        torch.testing.assert_close(call(*inputs), through_custom_op[0].detach(), rtol=0, atol=0)
        with torch.no_grad():
            torch.testing.assert_close(call(*grad_inputs), through_custom_op[0].detach(), rtol=0, atol=0)


def test_torch_compile_traces_through_the_kernels():
    x, offsets, weight = small_inputs(torch.float32, requires_grad=True)

    def mix(x, offsets, weight):
        return talk_conv(x, offsets, None, 3, 0, backend="cpu") + dynamic_conv(x, weight, 3, backend="cpu")

    compiled = torch.compile(mix, backend="aot_eager", fullgraph=True)
    out = compiled(x, offsets, weight)
    torch.testing.assert_close(out, mix(x, offsets, weight))
    grads = torch.autograd.grad(out.sum(), (x, offsets, weight))
    expected = torch.autograd.grad(mix(x, offsets, weight).sum(), (x, offsets, weight))
    for grad, reference in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, reference)


# --- CUDA --------------------------------------------------------------------------------------
# talk_conv runs its tiled forward and its streaming backward, dynamic_conv and light_conv their
# streaming kernels (the shapes at the streaming kernels' edges: test_cuda_kernels.py).

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def on_cuda(shape, dtype, max_offset=None):
    """Unit-scale normal values on the GPU in ``dtype``; with ``max_offset``, offsets in (0, 1.2)
    instead, whose window edges sit at least 0.1 tokens off the integers (where the offset
    gradient jumps from one token to the next, so float32 and float64 may pick different ones)."""
    if max_offset is None:
        return torch.randn(shape, dtype=torch.float64).to("cuda", dtype)
    whole = torch.randint(0, int(1.2 * max_offset) + 1, shape).double()
    return ((whole + 0.1 + 0.8 * torch.rand(shape, dtype=torch.float64)) / max_offset).to("cuda", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "batch,length,heads,head_size,max_left,max_right",
    [
        (2, 1, 2, 4, 3, 3),  # T = 1
        (2, 300, 4, 8, 7, 9),  # several tiles, bidirectional
        (2, 300, 4, 8, 15, 0),  # causal
        (1, 70_000, 1, 33, 31, 31),  # long, B*H = 1, a partial chunk of channels
        (1, 50, 3, 1, 80, 80),  # head size 1, windows clipped at both ends
        (2, 129, 2, 40, 400, 3),  # reach wider than one shared-memory pass
    ],
)
def test_cuda_talk_conv_matches_reference(dtype, batch, length, heads, head_size, max_left, max_right):
    inputs = [on_cuda((batch, length, heads * head_size), dtype), on_cuda((batch, length, heads), dtype, max_left)]
    if max_right:
        inputs.append(on_cuda((batch, length, heads), dtype, max_right))

    def run(backend):
        return lambda x, left, right=None: talk_conv(x, left, right, max_left, max_right, backend=backend)

    # Sums of up to K tokens, offset gradients over the head's channels: scale tolerances.
    window = min(max_left + max_right + 1, length)
    compare_with_reference(run("cuda"), run("torch"), inputs, dtype, [window / 4 + 1] + [head_size] * (len(inputs) - 1))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize(
    "batch,length,heads,head_size,kernel_size,padding_l",
    [
        (2, 1, 2, 4, 3, 1),  # T = 1
        (2, 200, 4, 8, 3, 2),  # odd K, causal
        (2, 200, 4, 8, 4, 2),  # even K
        (2, 200, 4, 8, 31, 15),  # K = 31, centred
        (1, 70_000, 1, 33, 7, 0),  # long, B*H = 1, looks only ahead
        (1, 40, 2, 3, 300, 150),  # K far beyond the fairseq set and longer than T
    ],
)
def test_cuda_conv_matches_reference(dtype, kind, batch, length, heads, head_size, kernel_size, padding_l):
    x = on_cuda((batch, length, heads * head_size), dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), -1).to("cuda", dtype)
    op = dynamic_conv if kind == "dynamic" else light_conv

    def run(backend):
        return lambda x, weight: op(x, weight, padding_l, backend=backend)

    weight_scale = head_size if kind == "dynamic" else head_size * batch * length
    compare_with_reference(run("cuda"), run("torch"), [x, weight], dtype, [1.0, weight_scale])


def tolerance(dtype):
    atol, rtol = TOLERANCES[dtype]
    return {"atol": atol, "rtol": rtol}


@pytest.mark.gpu
def test_cuda_non_contiguous_inputs():
    x = torch.randn(40, 3, 16, device="cuda").transpose(0, 1)  # (3, 40, 16), permuted strides
    both = torch.rand(3, 40, 4, 2, device="cuda")  # offsets as strided slices
    out = talk_conv(x, both[..., 0], both[..., 1], 5, 6, backend="cuda")
    expected = talk_conv(x, both[..., 0], both[..., 1], 5, 6, backend="torch")
    torch.testing.assert_close(out, expected, **tolerance(torch.float32))
    weight = torch.softmax(torch.randn(3, 40, 5, 4, device="cuda"), -2).transpose(-1, -2)  # (3, 40, 4, 5) view
    out = dynamic_conv(x, weight, 2, backend="cuda")
    torch.testing.assert_close(out, dynamic_conv(x, weight, 2, backend="torch"), **tolerance(torch.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("values", ["negative", "huge", "nan"])
def test_cuda_any_offset_value_is_safe_and_matches_the_cpu_kernel(values):
    x = torch.randn(2, 500, 40, dtype=torch.float64)
    offsets = torch.randn(2, 500, 4, dtype=torch.float64) * 3
    offsets = {
        "negative": -offsets.abs(),
        "huge": offsets.abs() * 1e4,
        "nan": offsets.where(offsets > 0, float("nan")),
    }[values]
    for offset_right, max_right in ((offsets.flip(1), 5), (None, 0)):
        on_cpu = talk_conv(x, offsets, offset_right, 7, max_right, backend="cpu")
        on_gpu = talk_conv(
            x.cuda(),
            offsets.cuda(),
            None if offset_right is None else offset_right.cuda(),
            7,
            max_right,
            backend="cuda",
        )
        torch.testing.assert_close(on_gpu.cpu(), on_cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("max_left,max_right", [(3, 4), (4, 0)])
def test_cuda_talk_conv_gradcheck_float64(max_left, max_right):
    x = torch.randn(2, 11, 6, dtype=torch.float64, device="cuda", requires_grad=True)
    inputs = [x, offsets_off_the_grid((2, 11, 3), max_left).cuda().requires_grad_()]
    if max_right:
        inputs.append(offsets_off_the_grid((2, 11, 3), max_right).cuda().requires_grad_())
    assert torch.autograd.gradcheck(
        lambda x, left, right=None: talk_conv(x, left, right, max_left, max_right, backend="cuda"),
        inputs,
        eps=1e-6,
        atol=1e-7,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize("kernel_size,padding_l", [(3, 1), (4, 3)])
def test_cuda_conv_gradcheck_float64(kind, kernel_size, padding_l):
    x = torch.randn(2, 7, 6, dtype=torch.float64, device="cuda", requires_grad=True)
    shape = (2, 7, 3, kernel_size) if kind == "dynamic" else (3, kernel_size)
    weight = torch.softmax(torch.randn(shape, dtype=torch.float64, device="cuda"), -1).requires_grad_()
    op = dynamic_conv if kind == "dynamic" else light_conv
    assert torch.autograd.gradcheck(lambda x, w: op(x, w, padding_l, backend="cuda"), (x, weight))


@pytest.mark.gpu
def test_cuda_small_shapes_match_definition():
    x = torch.randn(1, 9, 3, dtype=torch.float64)
    offsets = torch.rand(1, 9, 1, dtype=torch.float64)
    out = talk_conv(x.cuda(), offsets.cuda(), offsets.cuda(), 2, 2, backend="cuda")
    assert_close_to_reference(out.cpu(), naive_talk_conv(x, offsets, offsets, 2, 2), torch.float64)
    weight = torch.softmax(torch.randn(1, 9, 1, 4, dtype=torch.float64), -1)
    out = dynamic_conv(x.cuda(), weight.cuda(), 1, backend="cuda")
    assert_close_to_reference(out.cpu(), naive_dynamic_conv(x, weight, 1), torch.float64)


@pytest.mark.gpu
def test_auto_runs_the_cuda_kernels_on_cuda_tensors():
    x = torch.randn(2, 50, 8, device="cuda")
    offsets = torch.rand(2, 50, 2, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", BackendFallbackWarning)
        out = talk_conv(x, offsets, offsets, 3, 3, backend="auto")
    torch.testing.assert_close(out, talk_conv(x, offsets, offsets, 3, 3, backend="cuda"))


@pytest.mark.parametrize(
    "device,backend",
    [("cpu", "torch"), ("cpu", "cpu"), pytest.param("cuda", "cuda", marks=pytest.mark.gpu)],
)
def test_zero_channels_give_empty_outputs_and_zero_parameter_gradients(device, backend):
    """C = 0 with H = 2 heads is valid input: the offsets and kernels are not empty, their gradients 0."""
    x = torch.randn(2, 5, 0, device=device, requires_grad=True)
    offsets = torch.rand(2, 5, 2, device=device, requires_grad=True)
    kernel = torch.rand(2, 5, 2, 3, device=device, requires_grad=True)
    light_kernel = torch.rand(2, 3, device=device, requires_grad=True)
    outputs = [
        talk_conv(x, offsets, offsets, 2, 2, backend=backend),
        dynamic_conv(x, kernel, 1, backend=backend),
        light_conv(x, light_kernel, 1, backend=backend),
    ]
    assert all(out.shape == (2, 5, 0) for out in outputs)
    sum(out.sum() for out in outputs).backward()
    for tensor in (offsets, kernel, light_kernel):  # None (the PyTorch path drops them) or zeros, never garbage
        assert tensor.grad is None or torch.equal(tensor.grad, torch.zeros_like(tensor))
