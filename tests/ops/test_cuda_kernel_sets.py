"""The CUDA kernel sets: the default (talk_conv's tiled kernels, csrc/talk_conv/talk_conv_cuda.cu,
and the streaming kernels of dynamic_conv and light_conv on whole rows) and every streaming kernel
(csrc/<op>/<op>_cuda_stream.cu, packed rows too) where ``$TALK_HF_UNVERIFIED_CUDA`` names the ops.
The tiled kernels of dynamic_conv_cuda.cu run inside the streaming ones, for the shapes those do
not take.

The `gpu` tests of test_kernels.py run on both sets (the ``cuda_kernel_set`` fixture); the ones here
cover what the streaming kernels add: the shapes at their edges (a time chunk longer than T, T = 1,
channels that do not split into vectors, misaligned data, windows that leave the prefix ring),
that those shapes really run the streaming kernels rather than their fallback, and that neither set
synchronises with the host: forward and backward are captured in a CUDA graph, and a TaLK LM's
training step runs under ``torch.compile(mode="reduce-overhead")``.  Without a GPU, the kernels'
indexing is checked through a Python transcription of their per-thread loops (stream_emulation.py,
conv_stream_emulation.py).
"""

import pytest
import torch

import talk_hf
from talk_hf.ops import _extension, dynamic_conv, light_conv, talk_conv
from talk_hf.ops._backend import unverified_cuda_enabled
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv

from . import conv_stream_emulation, stream_emulation
from .conftest import CUDA_KERNEL_SETS
from .helpers import compare_with_reference
from .test_kernels import on_cuda, signed_window_talk_conv

STREAM_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def offsets_up_to(shape, top, dtype):
    """Offsets uniform in (0, top) on the GPU: top > 1 puts window edges outside the prefix ring."""
    return (top * torch.rand(shape, dtype=torch.float64)).to("cuda", dtype)


# (batch, length, heads, head_size, max_left, max_right, offset top, misaligned x)
TALK_EDGE_SHAPES = [
    (2, 1, 2, 8, 3, 3, 1.0, False),  # T = 1
    (3, 200, 2, 16, 5, 7, 1.0, False),  # T not a multiple of the chunk, several chunks
    (1, 50, 2, 16, 0, 0, 1.0, False),  # max_left = 0, causal: a window of the token alone
    (2, 90, 3, 6, 4, 4, 1.0, False),  # head size 6: float32 and bfloat16 threads take one channel
    (2, 90, 2, 16, 4, 4, 1.0, True),  # misaligned x: one channel a thread
    (2, 300, 2, 8, 7, 9, 3.0, False),  # offsets up to 3: edges outside the ring, the slow path
    (2, 40, 2, 8, 30, 30, 1.0, False),  # windows clipped at both ends of a short sequence
]


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_kernel_set")
@pytest.mark.parametrize("dtype", STREAM_DTYPES)
@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top,shift", TALK_EDGE_SHAPES)
def test_cuda_talk_conv_edge_shapes_match_reference(
    dtype, batch, length, heads, head_size, max_left, max_right, top, shift
):
    inputs = [on_cuda((batch, length, heads * head_size), dtype), offsets_up_to((batch, length, heads), top, dtype)]
    if max_right:
        inputs.append(offsets_up_to((batch, length, heads), top, dtype))
    assert _extension.load("cuda").talk_stream_fallback(inputs[0], inputs[1], max_left, max_right) == ""

    def run(backend):
        return lambda x, left, right=None: talk_conv(x, left, right, max_left, max_right, backend=backend)

    window = min(top * (max_left + max_right) + 1, length)
    compare_with_reference(
        run("cuda"), run("torch"), inputs, dtype, [window / 4 + 1] + [head_size] * (len(inputs) - 1), shift
    )


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
@pytest.mark.usefixtures("cuda_kernel_set")
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


@pytest.mark.gpu
def test_cuda_switch_chooses_the_kernel_set(monkeypatch):
    x = torch.randn(1, 4, 8, device="cuda")
    for variable, expected in [
        ("", "talk_forward"),
        ("dynamic_conv", "talk_forward"),
        ("talk_conv", "talk_forward_stream"),
    ]:
        monkeypatch.setenv("TALK_HF_UNVERIFIED_CUDA", variable)
        assert compiled_talk_conv.kernel(x, "forward").__name__ == expected
    for variable in ("", "all"):  # dynamic_conv and light_conv: the streaming kernels either way
        monkeypatch.setenv("TALK_HF_UNVERIFIED_CUDA", variable)
        assert compiled_light_conv.kernel(x, "backward").__name__ == "conv_backward_stream"
        assert compiled_dynamic_conv.kernel(x, "forward").__name__ == "conv_forward_stream"


def test_switch_leaves_cpu_tensors_on_the_cpu_kernels(monkeypatch):
    try:
        _extension.preflight("cpu")
    except _extension.ExtensionUnavailable as error:
        pytest.skip(str(error))
    monkeypatch.setenv("TALK_HF_UNVERIFIED_CUDA", "all")
    x = torch.randn(1, 4, 8)
    assert compiled_talk_conv.kernel(x, "forward") is _extension.load("cpu").talk_forward


def graph_case(name: str, position_ids: torch.Tensor | None = None):
    """(inputs needing gradients, op) of one op, small but over several chunks and weight tiles; with
    ``position_ids`` (2, 300), on packed rows."""
    x = torch.randn(2, 300, 64, device="cuda")
    left, right = torch.rand(2, 300, 4, device="cuda"), torch.rand(2, 300, 4, device="cuda")
    packed = dict(position_ids=position_ids, backend="cuda")
    if name == "talk_bidirectional":
        return [x, left, right], lambda x, left, right: talk_conv(x, left, right, 7, 9, **packed)
    if name == "talk_causal":
        return [x, left], lambda x, left: talk_conv(x, left, None, 15, 0, **packed)
    if name == "dynamic_conv":
        weight = torch.softmax(torch.randn(2, 300, 4, 7, device="cuda"), -1)
        return [x, weight], lambda x, weight: dynamic_conv(x, weight, 3, **packed)
    weight = torch.softmax(torch.randn(4, 7, device="cuda"), -1)
    return [x, weight], lambda x, weight: light_conv(x, weight, 6, **packed)


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
@pytest.mark.usefixtures("cuda_kernel_set")
@pytest.mark.parametrize("name", ["talk_bidirectional", "talk_causal", "dynamic_conv", "light_conv"])
def test_cuda_forward_and_backward_capture_in_a_cuda_graph(name):
    torch.manual_seed(0)
    assert_cuda_graph_replays_eager(*graph_case(name))


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_kernel_set")
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


def test_stream_kernel_set_names_switch_ops():
    """The "stream" set names ops the switch knows (a name a GPU session removed when it made the
    streaming kernels the default must leave the set too)."""
    for op in CUDA_KERNEL_SETS["stream"].split(","):
        unverified_cuda_enabled(op)  # raises ValueError for an unknown op


# --- The streaming kernels' indexing, emulated on the CPU (stream_emulation.py, conv_stream_emulation.py) -

# (batch, length, heads, head_size, max_left, max_right, offset top, width)
EMULATED_TALK_SHAPES = [
    (2, 1, 2, 4, 3, 3, 1.0, 4),  # T = 1
    (1, 300, 1, 4, 7, 9, 1.0, 4),  # several forward and backward chunks
    (1, 150, 2, 2, 5, 0, 1.0, 2),  # causal
    (1, 20, 1, 2, 0, 0, 1.0, 2),  # max_left = 0, causal
    (1, 140, 1, 2, 4, 3, 3.0, 2),  # offsets up to 3: edges outside the ring on both sides
    (1, 40, 2, 2, 30, 30, 1.0, 1),  # windows clipped at both ends, one channel a thread
]


@pytest.mark.parametrize("batch,length,heads,head_size,max_left,max_right,top,width", EMULATED_TALK_SHAPES)
def test_emulated_stream_talk_kernels_match_reference(batch, length, heads, head_size, max_left, max_right, top, width):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, length, heads * head_size, dtype=torch.float64, generator=generator)
    left, right = (top * torch.rand(batch, length, heads, dtype=torch.float64, generator=generator) for _ in "lr")
    left[:, ::3], right[:, 1::3] = 1.0, 1.0  # the widest windows: the edge rows farthest from t
    left[:, 1::5], right[:, ::5] = 0.0, 0.0
    right = right if max_right else None
    grad_out = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    leaves = [t.clone().requires_grad_() for t in (x, left, right) if t is not None]
    expected = talk_conv(*leaves[:2], leaves[2] if max_right else None, max_left, max_right, backend="torch")
    expected.backward(grad_out)

    stream_emulation.STATISTICS["slow_path_rows"] = 0
    torch.testing.assert_close(stream_emulation.talk_forward(x, left, right, max_left, max_right, width), expected)
    # Offsets in [0, 1] are answered from the ring alone; above 1, some edges leave it.
    assert (stream_emulation.STATISTICS["slow_path_rows"] > 0) == (top > 1)
    grad_x = stream_emulation.talk_grad_x(grad_out, left, right, max_left, max_right, width)
    torch.testing.assert_close(grad_x, leaves[0].grad)
    grad_left, grad_right = stream_emulation.talk_offsets(x, grad_out, left, right, max_left, max_right, width)
    torch.testing.assert_close(grad_left, leaves[1].grad)
    if max_right:
        torch.testing.assert_close(grad_right, leaves[2].grad)


@pytest.mark.parametrize("values", ["negative", "nan"])
def test_emulated_stream_talk_forward_follows_the_signed_window_formula(values):
    """Reversed windows and NaN edges reach both slow paths of the prefix ring."""
    x = torch.randn(1, 150, 4, dtype=torch.float64)
    offsets = torch.rand(1, 150, 1, dtype=torch.float64) * 3
    offsets = -offsets if values == "negative" else offsets.where(offsets > 1, float("nan"))
    for right, max_right in ((offsets.flip(1), 5), (None, 0)):
        torch.testing.assert_close(
            stream_emulation.talk_forward(x, offsets, right, 7, max_right, 2),
            signed_window_talk_conv(x, offsets, right, 7, max_right),
        )


# (kind, batch, length, heads, head_size, kernel_size, padding_l, width)
EMULATED_CONV_SHAPES = [
    ("dynamic", 1, 1, 2, 4, 31, 15, 4),  # T = 1, K > T
    ("dynamic", 1, 300, 2, 8, 31, 30, 4),  # causal K = 31 over several chunks and weight tiles
    ("dynamic", 1, 70, 2, 4, 1, 0, 4),  # K = 1
    ("dynamic", 1, 70, 2, 4, 2, 1, 2),  # even K
    ("dynamic", 1, 100, 1, 40, 5, 2, 4),  # a head wider than one staged channel pass
    ("dynamic", 1, 50, 1, 200, 3, 1, 4),  # a head wider than a block's channels
    ("dynamic", 1, 60, 40, 4, 5, 2, 4),  # a block of 33 staged heads
    ("dynamic", 1, 40, 24, 6, 4, 3, 2),  # blocks that start inside a head
    ("light", 2, 90, 3, 4, 7, 3, 4),
]


@pytest.mark.parametrize("kind,batch,length,heads,head_size,kernel_size,padding_l,width", EMULATED_CONV_SHAPES)
def test_emulated_stream_conv_kernels_match_reference(
    kind, batch, length, heads, head_size, kernel_size, padding_l, width
):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, length, heads * head_size, dtype=torch.float64, generator=generator)
    shape = (batch, length, heads, kernel_size) if kind == "dynamic" else (heads, kernel_size)
    weight = torch.softmax(torch.randn(shape, dtype=torch.float64, generator=generator), -1)
    grad_out = torch.randn(x.shape, dtype=torch.float64, generator=generator)
    leaves = [x.clone().requires_grad_(), weight.clone().requires_grad_()]
    op = dynamic_conv if kind == "dynamic" else light_conv
    expected = op(*leaves, padding_l, backend="torch")
    expected.backward(grad_out)

    per_token = weight if kind == "dynamic" else weight.expand(batch, length, heads, kernel_size)
    torch.testing.assert_close(conv_stream_emulation.conv(x, per_token, padding_l, width, transpose=False), expected)
    grad_x = conv_stream_emulation.conv(grad_out, per_token, padding_l, width, transpose=True)
    torch.testing.assert_close(grad_x, leaves[0].grad)
    grad_weight = conv_stream_emulation.conv_grad_weight(x, grad_out, heads, kernel_size, padding_l)
    torch.testing.assert_close(grad_weight if kind == "dynamic" else grad_weight.sum((0, 1)), leaves[1].grad)
