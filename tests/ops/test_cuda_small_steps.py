"""No host read in any op's CUDA forward and backward at Table 6's T = 10 (issue #56).

At B = 10, C = 1,024, H = 16 and T = 10 an op's forward and backward cost launches and host work,
not bandwidth: a host synchronisation (``.item()``, a device-to-host copy, a check that reads
device values) would stall the pipeline at every call.  Each op, whole and packed, in float32 and
bfloat16 (where dynamic_conv's k = 31 kernels opt in to more shared memory), runs its forward and
backward

* under ``torch.cuda.set_sync_debug_mode("error")``, where any synchronising call raises, after one
  warm-up call (the extension's build and load, the allocator's first blocks), and matches the
  PyTorch path in float64;
* captured in a CUDA graph, which fails on a host sync as well, and replays what eager computes.

A packed row's `DocumentEdges` are derived before (once per batch, as the models do): their value
check reads position_ids on the host in an eager call, and is skipped under capture and
``torch.compile`` (`talk_hf.ops.documents`).
"""

import pytest
import torch

from talk_hf.ops import depthwise_conv, dynamic_conv, light_conv, talk_conv

from .helpers import assert_close_to_reference
from .test_cuda_kernels import assert_cuda_graph_replays_eager
from .test_kernels import on_cuda
from .test_packed_cuda_kernels import fuzzed_edges

pytestmark = pytest.mark.gpu

BATCH, LENGTH, HEADS, CHANNELS = 10, 10, 16, 1024  # Table 6 (the TaLK paper) at its shortest length
CASES = ("talk_bidirectional", "talk_causal", "dynamic_conv_k3", "dynamic_conv_k31", "light_conv_k31", "depthwise_conv")
DTYPES = (torch.float32, torch.bfloat16)


def small_case(name: str, dtype: torch.dtype, packed: bool):
    """(inputs needing gradients, op(*inputs, backend=...)) of one case at Table 6's T = 10."""
    x = on_cuda((BATCH, LENGTH, CHANNELS), dtype)
    edges = fuzzed_edges(BATCH, LENGTH, 4, seed=5) if packed else None
    if name.startswith("talk"):
        offsets = on_cuda((BATCH, LENGTH, HEADS), dtype, 31)
        if name == "talk_causal":
            return [x, offsets], lambda x, left, backend: talk_conv(
                x, left, None, 31, 0, document_edges=edges, backend=backend
            )
        right = on_cuda((BATCH, LENGTH, HEADS), dtype, 31)
        return [x, offsets, right], lambda x, left, right, backend: talk_conv(
            x, left, right, 31, 31, document_edges=edges, backend=backend
        )
    if name.startswith(("dynamic", "light")):
        taps = int(name.rsplit("_k", 1)[1])
        dynamic = name.startswith("dynamic")
        shape = (BATCH, LENGTH, HEADS, taps) if dynamic else (HEADS, taps)
        weight = torch.softmax(torch.randn(shape, dtype=torch.float64), -1).to("cuda", dtype)
        op = dynamic_conv if dynamic else light_conv
        return [x, weight], lambda x, weight, backend: op(x, weight, taps // 2, document_edges=edges, backend=backend)
    assert name == "depthwise_conv", name
    weight = (torch.randn(CHANNELS, 7, dtype=torch.float64) / 7**0.5).to("cuda", dtype)
    mask = torch.rand(BATCH, LENGTH, device="cuda") > 0.2
    return [x, weight], lambda x, weight, backend: depthwise_conv(
        x, weight, padding="centred", relu_input=True, input_mask=mask, document_edges=edges, backend=backend
    )


def forward_and_backward(op, inputs, grad_out):
    """op's output and its inputs' gradients for the output gradient ``grad_out``."""
    leaves = [tensor.detach().clone().requires_grad_() for tensor in inputs]
    out = op(*leaves)
    out.backward(grad_out)
    return [out.detach(), *(leaf.grad for leaf in leaves)]


@pytest.fixture(
    params=[(name, dtype, packed) for name in CASES for dtype in DTYPES for packed in (False, True)],
    ids=lambda param: f"{param[0]}-{str(param[1]).removeprefix('torch.')}-{'packed' if param[2] else 'whole'}",
)
def case(request):
    """(inputs, op, dtype) of each case, whole and packed, in each of `DTYPES`."""
    name, dtype, packed = request.param
    torch.manual_seed(0)
    return (*small_case(name, dtype, packed), dtype)


def test_cuda_forward_and_backward_at_t10_read_nothing_back_to_the_host(case):
    inputs, op, dtype = case
    grad_out = torch.randn(BATCH, LENGTH, CHANNELS, dtype=torch.float64, device="cuda")

    def on_cuda_kernels(*tensors):
        return op(*tensors, backend="cuda")

    forward_and_backward(on_cuda_kernels, inputs, grad_out.to(dtype))  # warm-up: build, load, allocator
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        actual = forward_and_backward(on_cuda_kernels, inputs, grad_out.to(dtype))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    expected = forward_and_backward(
        lambda *tensors: op(*tensors, backend="torch"), [tensor.double() for tensor in inputs], grad_out
    )
    for got, want in zip(actual, expected, strict=True):  # each on its own scale (a weight gradient sums B T terms)
        assert got.dtype == dtype
        assert_close_to_reference(got, want, dtype, scale=max(1.0, want.abs().max().item()))


def test_cuda_forward_and_backward_at_t10_capture_in_a_cuda_graph(case):
    inputs, op, _ = case
    assert_cuda_graph_replays_eager(inputs, lambda *tensors: op(*tensors, backend="cuda"))
