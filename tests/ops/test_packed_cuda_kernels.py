"""Packed rows (``position_ids``) on the CUDA kernels: every kernel takes document edges, but packed
calls run only on the sets behind ``$TALK_HF_UNVERIFIED_CUDA`` (the streaming kernels of talk_conv,
dynamic_conv and light_conv, and depthwise_conv's kernel) until a GPU has run the `gpu` tests here
and compute-sanitizer (benchmarks/sanitize_kernels.py) on them.

Without a GPU, the indexing of the streaming kernels and of depthwise_conv's with document edges
runs through their Python transcriptions (stream_emulation.py, conv_stream_emulation.py,
depthwise_emulation.py) on rows cut
at random into documents of 1 and 2 tokens, shorter and longer than the window, against the
loop-form definitions; and the routing is checked: a packed CUDA call runs the compiled kernels
only where the kernel set the switch picks is declared to run them.  Tests marked ``gpu`` run both kernel sets themselves (through the compiled ops, whatever the
routing) against the PyTorch path, forward and backward.
"""

import random

import pytest
import torch

from talk_hf.ops import _backend, _extension, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops._backend import UNVERIFIED_CUDA_ENV
from talk_hf.ops.depthwise_conv.depthwise_naive import naive_depthwise_conv
from talk_hf.ops.documents import document_edges
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.dynamic_conv.dynamic_naive import naive_dynamic_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv
from talk_hf.ops.talk_conv.talk_naive import naive_talk_conv

from . import conv_stream_emulation, depthwise_emulation, stream_emulation
from .conftest import CUDA_KERNEL_SETS
from .helpers import compare_with_reference
from .test_cuda_kernel_sets import (
    STREAM_DTYPES,
    assert_cuda_graph_replays_eager,
    graph_case,
    offsets_up_to,
)
from .test_depthwise_conv import assert_matches, make_inputs, outputs_and_gradients
from .test_kernels import on_cuda
from .test_packed_documents import FORMS, packed_position_ids

OPS = ("talk_conv", "dynamic_conv", "light_conv", "depthwise_conv")


def fuzzed_position_ids(batch: int, length: int, window: int, seed: int) -> torch.Tensor:
    """(B, T) positions of rows cut at random into documents of 1 and 2 tokens, of about half the
    window and longer than the window (the last one cut at T)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(batch):
        lengths = []
        while sum(lengths) < length:
            lengths.append(rng.choice([1, 2, max(1, window // 2), window + rng.randint(1, 2 * window)]))
        lengths[-1] -= sum(lengths) - length
        rows.append(torch.cat([torch.arange(n) for n in lengths if n > 0]))
    return torch.stack(rows)


# --- The streaming kernels' indexing with document edges, emulated on the CPU --------------------

# (batch, length, heads, head_size, max_left, max_right, offset top, width)
EMULATED_TALK_SHAPES = [
    (2, 150, 1, 2, 7, 9, 1.0, 2),  # several forward and backward chunks
    (2, 90, 2, 2, 5, 0, 1.0, 2),  # causal
    (1, 140, 1, 2, 4, 3, 3.0, 2),  # offsets up to 3: edges past the ring, clamped at the documents
    (2, 40, 1, 2, 30, 30, 1.0, 1),  # windows wider than most documents, one channel a thread
]


@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top,width", EMULATED_TALK_SHAPES)
def test_emulated_stream_talk_kernels_take_packed_rows(
    batch, length, heads, head_size, max_left, max_right, top, width
):
    generator = torch.Generator().manual_seed(length)
    position_ids = fuzzed_position_ids(batch, length, max_left + max_right + 1, seed=length)
    x = torch.randn(batch, length, heads * head_size, dtype=torch.float64, generator=generator)
    left, right = (top * torch.rand(batch, length, heads, dtype=torch.float64, generator=generator) for _ in "lr")
    left[:, ::3], right[:, 1::3] = 1.0, 1.0  # the widest windows: clamped at most document edges
    right = right if max_right else None
    grad_out = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    leaves = [t.clone().requires_grad_() for t in (x, left, right) if t is not None]
    expected = talk_conv(
        *leaves[:2], leaves[2] if max_right else None, max_left, max_right, position_ids=position_ids, backend="torch"
    )
    expected.backward(grad_out)
    edges = document_edges(position_ids, x)

    stream_emulation.STATISTICS["slow_path_rows"] = 0
    torch.testing.assert_close(
        stream_emulation.talk_forward(x, left, right, max_left, max_right, width, edges),
        naive_talk_conv(x, left, right, max_left, max_right, position_ids),
    )
    if top <= 1:  # edges clamped into a document stay inside the ring
        assert stream_emulation.STATISTICS["slow_path_rows"] == 0
    grad_x = stream_emulation.talk_grad_x(grad_out, left, right, max_left, max_right, width, edges)
    torch.testing.assert_close(grad_x, leaves[0].grad)
    grad_left, grad_right = stream_emulation.talk_offsets(x, grad_out, left, right, max_left, max_right, width, edges)
    torch.testing.assert_close(grad_left, leaves[1].grad)
    if max_right:
        torch.testing.assert_close(grad_right, leaves[2].grad)


# (kind, batch, length, heads, head_size, kernel_size, padding_l, width)
EMULATED_CONV_SHAPES = [
    ("dynamic", 2, 150, 2, 4, 31, 30, 4),  # causal K = 31: several chunks and weight tiles
    ("dynamic", 2, 70, 2, 4, 7, 3, 2),  # centred
    ("dynamic", 1, 60, 2, 4, 4, 0, 4),  # even K, looking only ahead
    ("dynamic", 1, 50, 1, 40, 5, 2, 4),  # a head wider than one staged channel pass
    ("light", 2, 90, 3, 4, 7, 3, 4),
]


@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l,width", EMULATED_CONV_SHAPES)
def test_emulated_stream_conv_kernels_take_packed_rows(
    kind, batch, length, heads, head_size, kernel_size, padding_l, width
):
    generator = torch.Generator().manual_seed(length)
    position_ids = fuzzed_position_ids(batch, length, kernel_size, seed=length)
    x = torch.randn(batch, length, heads * head_size, dtype=torch.float64, generator=generator)
    shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(shape, dtype=torch.float64, generator=generator), -1)
    grad_out = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
    expected = naive_dynamic_conv(*leaves, padding_l, position_ids)
    expected.backward(grad_out)
    edges = document_edges(position_ids, x)

    per_token = weight if kind == "dynamic" else weight.expand(batch, length, heads, kernel_size)
    forward = conv_stream_emulation.conv(x, per_token, padding_l, width, transpose=False, edges=edges)
    torch.testing.assert_close(forward, expected)
    grad_x = conv_stream_emulation.conv(grad_out, per_token, padding_l, width, transpose=True, edges=edges)
    torch.testing.assert_close(grad_x, leaves[0].grad)
    grad_weight = conv_stream_emulation.conv_grad_weight(x, grad_out, heads, kernel_size, padding_l, edges)
    torch.testing.assert_close(grad_weight if kind == "dynamic" else grad_weight.sum((0, 1)), leaves[1].grad)


# (batch, length, channels, kernel_size, dilation, padding)
EMULATED_DEPTHWISE_SHAPES = [
    (2, 150, 3, 7, 1, "causal"),  # several correlation tiles
    (1, 300, 2, 5, 3, "centred"),  # dilated, two weight-gradient tiles
    (2, 40, 2, 4, 2, "causal"),  # even K
]


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("batch,length,channels,kernel_size,dilation,padding", EMULATED_DEPTHWISE_SHAPES)
def test_emulated_depthwise_kernels_match_reference(packed, batch, length, channels, kernel_size, dilation, padding):
    generator = torch.Generator().manual_seed(length)
    position_ids = fuzzed_position_ids(batch, length, kernel_size * dilation, seed=length) if packed else None
    x = torch.randn(batch, length, channels, dtype=torch.float64, generator=generator)
    weight = torch.randn(channels, kernel_size, dtype=torch.float64, generator=generator)
    grad_out = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    left = (kernel_size - 1 if padding == "causal" else kernel_size // 2) * dilation
    leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
    expected = naive_depthwise_conv(*leaves, dilation, left, position_ids)
    expected.backward(grad_out)
    edges = None if position_ids is None else document_edges(position_ids, x)

    torch.testing.assert_close(depthwise_emulation.correlate(x, weight, dilation, left, False, edges), expected)
    grad_x, grad_weight = depthwise_emulation.backward(grad_out, x, weight, dilation, left, edges)
    torch.testing.assert_close(grad_x, leaves[0].grad)
    torch.testing.assert_close(grad_weight, leaves[1].grad)


# --- Routing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_packed_cuda_calls_run_the_kernels_of_the_set_that_takes_them(op, monkeypatch):
    """With the switch on, every op's packed CUDA calls run its kernels; off, the default kernels would
    run, whose packed form no sanitizer has run: "auto" runs the PyTorch path and "cuda" says how to
    get kernels that run packed rows (depthwise_conv, with no default kernel, runs the PyTorch path
    anyway, for the switch's reason)."""
    cuda = torch.device("cuda")
    monkeypatch.setenv(UNVERIFIED_CUDA_ENV, "all")
    assert _backend.cuda_takes_packed_rows(op)
    monkeypatch.setenv(UNVERIFIED_CUDA_ENV, "")
    assert _backend.resolve_backend("auto", cuda, op, packed=True) == "torch"
    if op == "depthwise_conv":
        match = "no GPU has verified"
    else:
        assert not _backend.cuda_takes_packed_rows(op)
        match = f"cannot run packed sequences .* {UNVERIFIED_CUDA_ENV}={op}"
    with pytest.raises(ValueError, match=match):
        _backend.resolve_backend("cuda", cuda, op, packed=True)


# --- On a GPU: the kernels themselves ----------------------------------------------------------------


@pytest.fixture
def packed_kernels(monkeypatch):
    """Switch on the unverified CUDA kernels: those that packed calls run on."""
    monkeypatch.setenv(UNVERIFIED_CUDA_ENV, "all")


# (batch, length, heads, head_size, max_left, max_right, offset top)
PACKED_TALK_SHAPES = [
    (2, 300, 2, 16, 7, 9, 1.0),  # several chunks
    (2, 300, 4, 8, 15, 0, 1.0),  # causal
    (2, 300, 2, 8, 7, 9, 3.0),  # offsets up to 3: edges past the ring
    (3, 90, 3, 6, 4, 4, 1.0),  # head size 6: float32 and bfloat16 threads take one channel
    (2, 60, 2, 8, 30, 30, 1.0),  # windows wider than most documents
]


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_kernel_set")
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top", PACKED_TALK_SHAPES)
def test_cuda_packed_talk_conv_matches_reference(dtype, batch, length, heads, head_size, max_left, max_right, top):
    position_ids = fuzzed_position_ids(batch, length, max_left + max_right + 1, seed=length).cuda()
    inputs = [on_cuda((batch, length, heads * head_size), dtype), offsets_up_to((batch, length, heads), top, dtype)]
    if max_right:
        inputs.append(offsets_up_to((batch, length, heads), top, dtype))

    def reference(x, left, right=None):
        return talk_conv(x, left, right, max_left, max_right, position_ids=position_ids, backend="torch")

    def kernels(x, left, right=None):  # the compiled op itself: the kernel set's kernels, whatever the routing
        return compiled_talk_conv(x, left, right, max_left, max_right, document_edges(position_ids, x))

    window = min(top * (max_left + max_right) + 1, length)
    compare_with_reference(kernels, reference, inputs, dtype, [window / 4 + 1] + [head_size] * (len(inputs) - 1), False)


# (kind, batch, length, heads, head_size, kernel_size, padding_l)
PACKED_CONV_SHAPES = [
    ("dynamic", 2, 300, 4, 16, 31, 30),  # causal K = 31: several chunks and weight tiles
    ("dynamic", 2, 300, 4, 16, 31, 15),
    ("dynamic", 2, 150, 3, 6, 8, 0),  # even K looking ahead, one channel a thread
    ("light", 2, 300, 4, 16, 31, 15),
    ("light", 2, 150, 3, 6, 4, 3),
]


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_kernel_set")
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l", PACKED_CONV_SHAPES)
def test_cuda_packed_conv_matches_reference(dtype, kind, batch, length, heads, head_size, kernel_size, padding_l):
    position_ids = fuzzed_position_ids(batch, length, kernel_size, seed=length).cuda()
    x = on_cuda((batch, length, heads * head_size), dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), -1).to("cuda", dtype)
    op, compiled_op = (dynamic_conv, compiled_dynamic_conv) if kind == "dynamic" else (light_conv, compiled_light_conv)

    def reference(x, weight):
        return op(x, weight, padding_l, position_ids=position_ids, backend="torch")

    def kernels(x, weight):  # the compiled op itself: the kernel set's kernels, whatever the routing
        return compiled_op(x, weight, padding_l, document_edges(position_ids, x))

    weight_scale = head_size if kind == "dynamic" else head_size * batch * length
    compare_with_reference(kernels, reference, [x, weight], dtype, [1.0, weight_scale], False)


@pytest.mark.gpu
@pytest.mark.usefixtures("packed_kernels")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(
    "length,channels,kernel_size,dilation,padding,gated",
    [
        (300, 70, 31, 1, "causal", False),  # several tiles, a partial block of channels
        (300, 70, 5, 4, "centred", False),  # dilated
        (120, 64, 15, 1, "centred", True),  # ReLU and mask
    ],
)
def test_cuda_packed_depthwise_conv_matches_reference(dtype, length, channels, kernel_size, dilation, padding, gated):
    position_ids = fuzzed_position_ids(2, length, kernel_size * dilation, seed=length).cuda()
    x, weight = make_inputs(2, length, channels, kernel_size, dtype, "cuda")
    mask = (torch.rand(2, length) > 0.2).cuda() if gated else None

    def run(backend):
        return lambda x, w: depthwise_conv(
            x,
            w,
            dilation=dilation,
            padding=padding,
            relu_input=gated,
            input_mask=mask,
            position_ids=position_ids,
            backend=backend,
        )

    actual = outputs_and_gradients(run("cuda"), x, weight)
    assert_matches(actual, outputs_and_gradients(run("torch"), x.double(), weight.double()), dtype)


@pytest.mark.gpu
@pytest.mark.usefixtures("packed_kernels")
@pytest.mark.parametrize("name", sorted(FORMS))
def test_cuda_gradcheck_of_the_packed_form(name, monkeypatch):
    monkeypatch.setenv("TALK_HF_BACKEND", "cuda")
    form = FORMS[name]
    position_ids = packed_position_ids([1, 2, 5, 9], [9, 5, 1, 2]).cuda()
    inputs = [tensor.cuda() for tensor in form.inputs(*position_ids.shape)]
    float_inputs = [tensor.requires_grad_() for tensor in inputs if tensor.is_floating_point()]
    others = inputs[len(float_inputs) :]
    assert torch.autograd.gradcheck(
        lambda *floats: form.call(position_ids, *floats, *others), float_inputs, eps=1e-6, atol=1e-7
    )


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_auto_runs_packed_calls_on_the_cuda_kernels_that_take_them(op, monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setenv(UNVERIFIED_CUDA_ENV, "all")
    assert _backend.resolve_backend("auto", cuda, op, packed=True) == "cuda"
    monkeypatch.setenv(UNVERIFIED_CUDA_ENV, CUDA_KERNEL_SETS["default"])
    assert _backend.resolve_backend("auto", cuda, op, packed=True) == "torch"


@pytest.mark.gpu
@pytest.mark.usefixtures("packed_kernels")
def test_packed_shapes_the_streaming_kernels_do_not_take_run_the_tiled_kernels():
    """Windows too wide for the streaming forward's shared memory: the tiled kernels, with the edges."""
    x = torch.randn(2, 300, 8, dtype=torch.float64, device="cuda")
    offsets = torch.rand(2, 300, 2, dtype=torch.float64, device="cuda")
    assert _extension.load("cuda").talk_stream_fallback(x, offsets, 4000, 0) != ""
    position_ids = fuzzed_position_ids(2, 300, 100, seed=0).cuda()
    compare_with_reference(
        lambda x, left: talk_conv(x, left, None, 4000, 0, position_ids=position_ids, backend="cuda"),
        lambda x, left: talk_conv(x, left, None, 4000, 0, position_ids=position_ids, backend="torch"),
        [x, offsets],
        torch.float64,
        [1.0, 1.0],
        False,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dynamic", "light"])
@pytest.mark.parametrize("packed", [False, True], ids=["whole", "packed"])
def test_conv_shapes_the_streaming_kernels_do_not_take_run_the_tiled_kernels(kind, packed):
    """A kernel too wide for the streaming kernels' shared memory: the tiled kernels of
    dynamic_conv_cuda.cu run inside them (the conv ops' only other CUDA kernels), edges included."""
    batch, length, heads, kernel_size, padding_l = 2, 120, 2, 301, 150
    x = torch.randn(batch, length, heads * 4, dtype=torch.float64, device="cuda")
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64, device="cuda"), -1)
    per_token = weight if kind == "dynamic" else weight.expand(batch, length, heads, kernel_size)
    assert _extension.load("cuda").conv_stream_fallback(x, per_token, padding_l) != ""
    position_ids = fuzzed_position_ids(batch, length, 40, seed=1).cuda() if packed else None
    edges = None if position_ids is None else document_edges(position_ids, x)
    op, compiled_op = (dynamic_conv, compiled_dynamic_conv) if kind == "dynamic" else (light_conv, compiled_light_conv)
    compare_with_reference(
        lambda x, weight: compiled_op(x, weight, padding_l, edges),
        lambda x, weight: op(x, weight, padding_l, position_ids=position_ids, backend="torch"),
        [x, weight],
        torch.float64,
        [1.0, 1.0],
        False,
    )


@pytest.mark.gpu
@pytest.mark.usefixtures("packed_kernels")
@pytest.mark.parametrize("name", ["talk_bidirectional", "talk_causal", "dynamic_conv", "light_conv"])
def test_packed_forward_and_backward_capture_in_a_cuda_graph(name):
    """Packed calls skip their host-syncing value check while a CUDA graph captures them."""
    torch.manual_seed(0)
    assert_cuda_graph_replays_eager(*graph_case(name, fuzzed_position_ids(2, 300, 17, seed=3).cuda()))
