"""What the streaming CUDA kernels add at their edges, and the entry points that the compiled ops call.

On CUDA, talk_conv runs its tiled forward (csrc/talk_conv/talk_conv_cuda.cu) and its streaming
backward (talk_conv_cuda_stream.cu); dynamic_conv and light_conv run their streaming kernels
(csrc/dynamic_conv/dynamic_conv_cuda_stream.cu); depthwise_conv runs its own kernel.  A streaming
kernel hands the shapes it does not take (32-bit indices, the grid, shared memory) to the tiled
kernels (test_packed_cuda_kernels.py calls those directly).

The `gpu` tests of test_kernels.py run the kernels on model-like shapes; the ones here cover what
the streaming kernels add at their edges (T = 1, channels that do not split into vectors,
misaligned data, windows past the chunk, offsets above 1), that those shapes really run the
streaming kernels (the extension's ``talk_stream_fallback`` and ``conv_stream_fallback`` say "" for
them), and that nothing synchronises with the host: forward and backward are captured in a CUDA
graph, and a TaLK LM's training step runs under ``torch.compile(mode="reduce-overhead")``.  The
compiled ops call the fixed entry points of the tensors' extension (on the CPU too).
"""

import pytest
import torch

import talk_hf
from talk_hf.ops import DocumentEdges, _extension, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops.depthwise_conv.depthwise_compiled import compiled_depthwise_conv
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv

from .helpers import compare_with_reference
from .test_kernels import on_cuda

STREAM_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def offsets_up_to(shape, top, dtype):
    """Offsets uniform in (0, top) on the GPU: top > 1 gives windows wider than max_left and max_right
    (as after dropout), which reach past the tokens that offsets in [0, 1] reach."""
    return (top * torch.rand(shape, dtype=torch.float64)).to("cuda", dtype)


# (batch, length, heads, head_size, max_left, max_right, offset top, misaligned x).  The backward's
# grad_x kernel takes one channel a thread, its offset-gradient kernel a vector of the head's
# channels (16 bytes) where they split into aligned vectors, else one channel.
TALK_EDGE_SHAPES = [
    (2, 1, 2, 8, 3, 3, 1.0, False),  # T = 1
    (3, 200, 2, 16, 5, 7, 1.0, False),  # T not a multiple of the chunk, several chunks
    (1, 50, 2, 16, 0, 0, 1.0, False),  # max_left = 0, causal: a window of the token alone
    (2, 90, 3, 6, 4, 4, 1.0, False),  # head size 6: float32 and bfloat16 offset threads take one channel
    (2, 90, 2, 16, 4, 4, 1.0, True),  # misaligned x: the offset threads take one channel
    (2, 300, 2, 8, 7, 9, 3.0, False),  # offsets up to 3: windows past max_left and max_right
    (2, 40, 2, 8, 30, 30, 1.0, False),  # windows clipped at both ends of a short sequence
    (2, 300, 2, 8, 4000, 0, 1.0, False),  # windows far past the chunk: the backward's shared memory does not grow
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top,shift", TALK_EDGE_SHAPES)
def test_cuda_talk_conv_edge_shapes_match_reference(
    dtype, batch, length, heads, head_size, max_left, max_right, top, shift
):
    inputs = talk_inputs_on_cuda(dtype, batch, length, heads, head_size, max_right, top)
    # The streaming backward runs (the forward is the tiled kernel for every shape).
    assert _extension.load("cuda").talk_stream_fallback(inputs[0], inputs[1], max_left, max_right) == ""
    compare_talk_conv_with_reference(inputs, head_size, max_left, max_right, top, shift=shift)


def talk_inputs_on_cuda(dtype, batch, length, heads, head_size, max_right, top):
    """talk_conv's inputs on the GPU: x (B, T, H * head_size), then offset_left and (where max_right > 0)
    offset_right (B, T, H) uniform in (0, top)."""
    inputs = [on_cuda((batch, length, heads * head_size), dtype), offsets_up_to((batch, length, heads), top, dtype)]
    if max_right:
        inputs.append(offsets_up_to((batch, length, heads), top, dtype))
    return inputs


def compare_talk_conv_with_reference(inputs, head_size, max_left, max_right, top, *, edges=None, shift=False):
    """talk_conv on backend cuda against the float64 PyTorch path, forward and backward (`compare_with_reference`),
    on ``inputs`` (`talk_inputs_on_cuda`) and, with ``edges``, packed rows; tolerances scaled by the window
    (sums of up to K tokens) and the head size (offset gradients over the head's channels)."""
    length = inputs[0].shape[1]

    def run(backend):
        return lambda x, left, right=None: talk_conv(
            x, left, right, max_left, max_right, document_edges=edges, backend=backend
        )

    window = min(top * (max_left + max_right) + 1, length)
    scales = [window / 4 + 1] + [head_size] * (len(inputs) - 1)
    compare_with_reference(run("cuda"), run("torch"), inputs, inputs[0].dtype, scales, shift)


# (kind, batch, length, heads, head_size, kernel_size, padding_l, misaligned x)
CONV_EDGE_SHAPES = [
    ("dynamic", 2, 1, 2, 8, 31, 15, False),  # T = 1, K > T
    ("dynamic", 2, 10, 2, 8, 40, 20, False),  # K > T
    ("dynamic", 2, 200, 2, 16, 1, 0, False),  # K = 1
    ("dynamic", 2, 200, 2, 16, 2, 1, False),  # even K
    ("dynamic", 2, 300, 4, 16, 31, 30, False),  # causal K = 31, several chunks and weight tiles
    ("dynamic", 2, 300, 4, 16, 31, 0, False),  # looks only ahead
    ("dynamic", 2, 150, 3, 6, 7, 3, False),  # head size 6: one channel a thread (float32, bfloat16)
    ("dynamic", 2, 150, 2, 16, 7, 3, True),  # misaligned x
    ("dynamic", 1, 100, 1, 200, 5, 2, False),  # a head wider than a block's channels
    ("dynamic", 1, 100, 40, 4, 5, 2, False),  # many heads in one block
    ("light", 2, 300, 4, 16, 31, 15, False),
    ("light", 2, 150, 3, 6, 4, 3, True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l,shift", CONV_EDGE_SHAPES)
def test_cuda_conv_edge_shapes_match_reference(
    dtype, kind, batch, length, heads, head_size, kernel_size, padding_l, shift
):
    x = on_cuda((batch, length, heads * head_size), dtype)
    weight_shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(weight_shape, dtype=torch.float64), -1).to("cuda", dtype)
    per_token = weight if kind == "dynamic" else weight.expand(batch, length, heads, kernel_size)
    assert _extension.load("cuda").conv_stream_fallback(x, per_token, padding_l) == ""
    op = dynamic_conv if kind == "dynamic" else light_conv

    def run(backend):
        return lambda x, weight: op(x, weight, padding_l, backend=backend)

    weight_scale = head_size if kind == "dynamic" else head_size * batch * length
    compare_with_reference(run("cuda"), run("torch"), [x, weight], dtype, [1.0, weight_scale], shift)


# The entry points of each compiled op, the same names in the CPU and the CUDA extension.
ENTRY_POINTS = {
    "talk_conv": (compiled_talk_conv, "talk_forward", "talk_backward"),
    "dynamic_conv": (compiled_dynamic_conv, "conv_forward", "conv_backward"),
    "light_conv": (compiled_light_conv, "conv_forward", "conv_backward"),
    "depthwise_conv": (compiled_depthwise_conv, "depthwise_forward", "depthwise_backward"),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_compiled_ops_call_the_fixed_entry_points_of_the_tensors_extension(name, device):
    """On CUDA: talk_conv's tiled forward and streaming backward, the conv ops' streaming kernels,
    depthwise_conv's kernel; on the CPU, the CPU extension's kernels."""
    if device == "cpu":
        try:
            _extension.preflight("cpu")
        except _extension.ExtensionUnavailable as error:
            pytest.skip(str(error))
    compiled_op, forward, backward = ENTRY_POINTS[name]
    extension = _extension.load(device)
    x = torch.randn(1, 4, 8, device=device)
    assert compiled_op.kernel(x, "forward") is getattr(extension, forward)
    assert compiled_op.kernel(x, "backward") is getattr(extension, backward)


GRAPH_CASES = ("talk_bidirectional", "talk_causal", "dynamic_conv", "light_conv", "depthwise_conv")


def graph_case(name: str, position_ids: torch.Tensor | None = None, backend: str = "cuda"):
    """(inputs needing gradients, op) of one of `GRAPH_CASES`, small but over several chunks and
    weight tiles, on ``backend``; with ``position_ids`` (2, 300), on packed rows, their edges derived
    in each call (inside a captured graph too)."""
    x = torch.randn(2, 300, 64, device="cuda")
    left, right = torch.rand(2, 300, 4, device="cuda"), torch.rand(2, 300, 4, device="cuda")

    def packed():
        return dict(document_edges=None if position_ids is None else DocumentEdges(position_ids), backend=backend)

    if name == "talk_bidirectional":
        return [x, left, right], lambda x, left, right: talk_conv(x, left, right, 7, 9, **packed())
    if name == "talk_causal":
        return [x, left], lambda x, left: talk_conv(x, left, None, 15, 0, **packed())
    if name == "dynamic_conv":
        weight = torch.softmax(torch.randn(2, 300, 4, 7, device="cuda"), -1)
        return [x, weight], lambda x, weight: dynamic_conv(x, weight, 3, **packed())
    if name == "light_conv":
        weight = torch.softmax(torch.randn(4, 7, device="cuda"), -1)
        return [x, weight], lambda x, weight: light_conv(x, weight, 6, **packed())
    assert name == "depthwise_conv", name
    weight = torch.randn(64, 7, device="cuda") / 7**0.5
    mask = torch.rand(2, 300, device="cuda") > 0.2
    return [x, weight], lambda x, weight: depthwise_conv(
        x, weight, dilation=2, padding="centred", relu_input=True, input_mask=mask, **packed()
    )


def assert_cuda_graph_replays_eager(inputs: list[torch.Tensor], op) -> None:
    """Capture ``op``'s forward and backward in a CUDA graph (which fails on any host
    synchronisation) and replay it on new inputs: eager's output and gradients."""
    torch.manual_seed(0)
    static = [tensor.clone().requires_grad_() for tensor in inputs]
    grad_out = torch.randn_like(inputs[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (build, allocator) outside the capture
        op(*static).backward(grad_out)
    torch.cuda.current_stream().wait_stream(side)
    for tensor in static:
        tensor.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = op(*static)
        static_out.backward(grad_out)
    fresh = [tensor * 0.5 + 0.25 for tensor in inputs]  # new values, same shapes
    with torch.no_grad():
        for tensor, value in zip(static, fresh, strict=True):
            tensor.copy_(value)
    graph.replay()
    eager = [tensor.clone().requires_grad_() for tensor in fresh]
    expected = op(*eager)
    expected.backward(grad_out)
    torch.testing.assert_close(static_out, expected)
    for tensor, reference in zip(static, eager, strict=True):
        torch.testing.assert_close(tensor.grad, reference.grad)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GRAPH_CASES)
def test_cuda_forward_and_backward_capture_in_a_cuda_graph(name):
    torch.manual_seed(0)
    assert_cuda_graph_replays_eager(*graph_case(name))


@pytest.mark.gpu
def test_cuda_talk_lm_training_step_under_reduce_overhead_matches_eager(monkeypatch):
    """A tiny TaLK LM's forward and backward as CUDA graphs (torch.compile's "reduce-overhead"): no
    graph break and no step skipped from CUDA graphs (a host sync would skip it), eager's loss and
    gradients."""
    monkeypatch.setenv("TALK_HF_BACKEND", "cuda")
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    config = talk_hf.TaLKLMConfig(
        vocab_size=40, d_model=64, decoder_layers=2, decoder_ffn_dim=128, decoder_conv_heads=4,
        decoder_max_offsets=[3, 7], dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = talk_hf.TaLKForCausalLM(config).cuda().train()
    ids = torch.randint(3, 40, (2, 48), device="cuda")

    def step(module):
        module.zero_grad(set_to_none=True)
        loss = module(input_ids=ids, labels=ids).loss
        loss.backward()
        named = getattr(module, "_orig_mod", module).named_parameters()
        return loss.detach().clone(), {name: p.grad.clone() for name, p in named if p.grad is not None}

    expected_loss, expected = step(model)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, recording, replay
        loss, gradients = step(compiled)
    assert not torch._dynamo.utils.counters["inductor"]["cudagraph_skips"], dict(
        torch._dynamo.utils.counters["inductor"]
    )
    torch.testing.assert_close(loss, expected_loss, rtol=1e-4, atol=1e-5)
    assert gradients.keys() == expected.keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, expected[name], rtol=1e-3, atol=1e-5, msg=name)
