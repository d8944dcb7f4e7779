"""Packed rows (``document_edges``) on the CUDA kernels: every op's packed calls run its compiled CUDA
kernels, which take document edges, under backend ``"auto"`` and ``"cuda"`` alike.

Tests marked ``gpu`` run every op's packed form on rows cut at random into documents of 1 and 2
tokens, of about half the window and longer than the window, against the PyTorch path, forward and
backward; check that ``"auto"`` runs the compiled kernels on packed CUDA calls; call the tiled
kernels that the streaming ones hand the shapes they do not take to (`_extension.load("cuda")`'s
``talk_backward_tiled``, ``conv_forward_tiled`` and ``conv_backward_tiled``) directly, on whole and
packed rows; run the shapes that make the conv ops' streaming kernels fall back through the ops; and
capture packed calls in a CUDA graph.
"""

import random

import pytest
import torch

from talk_hf.ops import DocumentEdges, _extension, depthwise_conv, dynamic_conv, light_conv, talk_conv

from .helpers import assert_close_to_reference, compare_with_reference, offsets_off_the_grid, record_kernel_calls
from .test_cuda_kernels import (
    GRAPH_CASES,
    STREAM_DTYPES,
    assert_cuda_graph_replays_eager,
    compare_talk_conv_with_reference,
    graph_case,
    talk_inputs_on_cuda,
)
from .test_depthwise_conv import assert_matches, make_inputs, outputs_and_gradients
from .test_kernels import on_cuda
from .test_packed_documents import FORMS, packed_position_ids


def fuzzed_edges(batch: int, length: int, window: int, seed: int) -> DocumentEdges:
    """The CUDA `DocumentEdges` of `fuzzed_position_ids`."""
    return DocumentEdges(fuzzed_position_ids(batch, length, window, seed).cuda())


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


# --- Every op's packed form against the PyTorch path -------------------------------------------

# (batch, length, heads, head_size, max_left, max_right, offset top)
PACKED_TALK_SHAPES = [
    (2, 300, 2, 16, 7, 9, 1.0),  # several chunks
    (2, 300, 4, 8, 15, 0, 1.0),  # causal
    (2, 300, 2, 8, 7, 9, 3.0),  # offsets up to 3: windows past max_left and max_right, clamped at the documents
    (3, 90, 3, 6, 4, 4, 1.0),  # head size 6: float32 and bfloat16 offset threads take one channel
    (2, 60, 2, 8, 30, 30, 1.0),  # windows wider than most documents
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top", PACKED_TALK_SHAPES)
def test_cuda_packed_talk_conv_matches_reference(dtype, batch, length, heads, head_size, max_left, max_right, top):
    edges = fuzzed_edges(batch, length, max_left + max_right + 1, seed=length)
    inputs = talk_inputs_on_cuda(dtype, batch, length, heads, head_size, max_right, top)
    compare_talk_conv_with_reference(inputs, head_size, max_left, max_right, top, edges=edges)


# (kind, batch, length, heads, head_size, kernel_size, padding_l)
PACKED_CONV_SHAPES = [
    ("dynamic", 2, 300, 4, 16, 31, 30),  # causal K = 31: several chunks and weight tiles
    ("dynamic", 2, 300, 4, 16, 31, 15),
    ("dynamic", 2, 150, 3, 6, 8, 0),  # even K looking ahead, one channel a thread
    ("light", 2, 300, 4, 16, 31, 15),
    ("light", 2, 150, 3, 6, 4, 3),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l", PACKED_CONV_SHAPES)
def test_cuda_packed_conv_matches_reference(dtype, kind, batch, length, heads, head_size, kernel_size, padding_l):
    edges = fuzzed_edges(batch, length, kernel_size, seed=length)
    x = on_cuda((batch, length, heads * head_size), dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), -1).to("cuda", dtype)
    op = dynamic_conv if kind == "dynamic" else light_conv

    def run(backend):
        return lambda x, weight: op(x, weight, padding_l, document_edges=edges, backend=backend)

    weight_scale = head_size if kind == "dynamic" else head_size * batch * length
    compare_with_reference(run("cuda"), run("torch"), [x, weight], dtype, [1.0, weight_scale], False)


@pytest.mark.gpu
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
    edges = fuzzed_edges(2, length, kernel_size * dilation, seed=length)
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
            document_edges=edges,
            backend=backend,
        )

    actual = outputs_and_gradients(run("cuda"), x, weight)
    assert_matches(actual, outputs_and_gradients(run("torch"), x.double(), weight.double()), dtype)


@pytest.mark.gpu
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
@pytest.mark.parametrize("name", GRAPH_CASES)
def test_auto_runs_packed_cuda_calls_on_the_cuda_kernels(name, monkeypatch):
    """Under "auto", a packed call on CUDA tensors runs the compiled CUDA kernels, forward and
    backward (not the PyTorch path), and gives the results of backend "cuda"."""
    position_ids = fuzzed_position_ids(2, 300, 17, seed=5).cuda()
    results = {}
    for backend in ("auto", "cuda"):
        torch.manual_seed(0)  # the same inputs for both
        inputs, op = graph_case(name, position_ids, backend=backend)
        leaves = [tensor.requires_grad_() for tensor in inputs]
        with monkeypatch.context() as patch:
            calls = record_kernel_calls(patch)
            out = op(*leaves)
            gradients = torch.autograd.grad(out, leaves, torch.ones_like(out))
        assert {(device, direction) for _, device, direction in calls} == {("cuda", "forward"), ("cuda", "backward")}
        results[backend] = [out, *gradients]
    for auto, cuda in zip(results["auto"], results["cuda"], strict=True):
        torch.testing.assert_close(auto, cuda)


# --- The tiled kernels that the streaming ones fall back to ------------------------------------

# (batch, length, heads, head_size, max_left, max_right, offset top)
TILED_TALK_SHAPES = [
    (2, 1, 2, 8, 3, 3, 1),  # T = 1
    (2, 300, 2, 16, 7, 9, 1),  # several tiles, bidirectional
    (2, 300, 4, 8, 15, 0, 1),  # causal
    (2, 200, 2, 8, 7, 9, 3),  # offsets up to 3: windows past max_left and max_right
    (3, 90, 3, 6, 4, 4, 1),  # head size 6
    (2, 129, 2, 40, 400, 3, 1),  # reach wider than one shared-memory pass, windows wider than most documents
]


def off_the_grid_on_cuda(shape, max_offset, top, dtype):
    """Offsets in (0, top) on the GPU whose window edges t -/+ offset * max_offset sit at least 0.1
    tokens off the integers (where the offset gradient jumps, so float32 and float64 may pick
    different tokens); ``top`` an int."""
    return (offsets_off_the_grid(shape, max_offset * top) * top).to("cuda", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("packed", [False, True], ids=["whole", "packed"])
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top", TILED_TALK_SHAPES)
def test_talk_backward_tiled_matches_reference(
    dtype, packed, batch, length, heads, head_size, max_left, max_right, top
):
    """The tiled backward takes the shapes beyond the streaming backward's 32-bit indices and grid,
    too large to test through the op: called directly on small shapes, whole rows and packed, it
    gives the float64 PyTorch path's gradients, as the streaming backward does on the same inputs."""
    extension = _extension.load("cuda")
    x = on_cuda((batch, length, heads * head_size), dtype)
    left = off_the_grid_on_cuda((batch, length, heads), max_left, top, dtype)
    right = off_the_grid_on_cuda((batch, length, heads), max_right, top, dtype) if max_right else None
    grad_out = on_cuda(x.shape, dtype)
    edges = fuzzed_edges(batch, length, max_left + max_right + 1, seed=length) if packed else None
    edge_tensor = None if edges is None else edges.tensor

    leaves = [tensor.double().requires_grad_() for tensor in (x, left, right) if tensor is not None]
    out = talk_conv(
        *leaves[:2], leaves[2] if max_right else None, max_left, max_right, document_edges=edges, backend="torch"
    )
    out.backward(grad_out.double())
    window = min(top * (max_left + max_right) + 1, length)
    scales = [window / 4 + 1] + [head_size] * (len(leaves) - 1)
    for backward in (extension.talk_backward_tiled, extension.talk_backward):
        grad_x, grad_left, grad_right = backward(grad_out, x, left, right, max_left, max_right, edge_tensor)
        gradients = [grad_x, grad_left] + ([grad_right] if max_right else [])  # causal: none for offset_right
        for gradient, leaf, scale in zip(gradients, leaves, scales, strict=True):
            assert gradient.shape == leaf.shape and gradient.device.type == "cuda"
            assert_close_to_reference(gradient, leaf.grad, dtype, scale=scale)


# (kind, batch, length, heads, head_size, kernel_size, padding_l)
TILED_CONV_SHAPES = [
    ("dynamic", 2, 1, 2, 8, 31, 15),  # T = 1, K > T
    ("dynamic", 2, 300, 4, 16, 31, 30),  # causal K = 31, several tiles
    ("dynamic", 2, 150, 3, 6, 8, 0),  # even K looking ahead, head size 6
    ("light", 2, 300, 4, 16, 31, 15),
    ("light", 2, 150, 3, 6, 4, 3),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("packed", [False, True], ids=["whole", "packed"])
@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l", TILED_CONV_SHAPES)
def test_conv_tiled_kernels_match_reference(
    dtype, packed, kind, batch, length, heads, head_size, kernel_size, padding_l
):
    """The tiled forward and backward that the conv ops' streaming kernels fall back to, called
    directly on shapes the streaming kernels take: both give the float64 PyTorch path's results,
    document edges included."""
    extension = _extension.load("cuda")
    x = on_cuda((batch, length, heads * head_size), dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), -1).to("cuda", dtype)
    per_token = weight if kind == "dynamic" else weight.expand(batch, length, heads, kernel_size)
    assert extension.conv_stream_fallback(x, per_token, padding_l) == ""
    grad_out = on_cuda(x.shape, dtype)
    edges = fuzzed_edges(batch, length, kernel_size, seed=length) if packed else None
    edge_tensor = None if edges is None else edges.tensor

    leaves = [x.double().requires_grad_(), weight.double().requires_grad_()]
    op = dynamic_conv if kind == "dynamic" else light_conv
    expected = op(*leaves, padding_l, document_edges=edges, backend="torch")
    expected.backward(grad_out.double())
    weight_scale = head_size if kind == "dynamic" else head_size * batch * length
    sum_weight_gradient = kind == "light"
    for forward, backward in (
        (extension.conv_forward_tiled, extension.conv_backward_tiled),
        (extension.conv_forward, extension.conv_backward),
    ):
        out = forward(x, per_token, padding_l, edge_tensor)
        assert out.dtype == dtype
        assert_close_to_reference(out, expected, dtype)
        grad_x, grad_weight = backward(grad_out, x, per_token, padding_l, sum_weight_gradient, edge_tensor)
        assert grad_weight.shape == weight.shape
        assert_close_to_reference(grad_x, leaves[0].grad, dtype)
        assert_close_to_reference(grad_weight, leaves[1].grad, dtype, scale=weight_scale)


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
    edges = fuzzed_edges(batch, length, 40, seed=1) if packed else None
    op = dynamic_conv if kind == "dynamic" else light_conv
    compare_with_reference(
        lambda x, weight: op(x, weight, padding_l, document_edges=edges, backend="cuda"),
        lambda x, weight: op(x, weight, padding_l, document_edges=edges, backend="torch"),
        [x, weight],
        torch.float64,
        [1.0, 1.0],
        False,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPH_CASES)
def test_packed_forward_and_backward_capture_in_a_cuda_graph(name):
    """Packed calls derive their edges inside the capture, skipping the host-syncing value check."""
    torch.manual_seed(0)
    assert_cuda_graph_replays_eager(*graph_case(name, fuzzed_position_ids(2, 300, 17, seed=3).cuda()))
