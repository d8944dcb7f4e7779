"""Drive every CUDA kernel through its edge paths, for compute-sanitizer (no checks of values: the
`gpu` tests compare them with the reference; this looks for out-of-bounds accesses and races).

    compute-sanitizer --tool memcheck  python benchmarks/sanitize_kernels.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_kernels.py

Covered, forward and backward, in float32/float16/bfloat16/float64: causal and bidirectional
talk_conv, a partial block of channels (C = 33), windows wider than one shared-memory pass, huge
(clamped), negative (reversed) and NaN offsets, zero channels; dynamic_conv and light_conv with
odd, even and K > T kernels; depthwise_conv causal, centred and dilated, with and without its input
gate.  Every case runs on both CUDA kernel sets: the tiled kernels (csrc/<op>/<op>_cuda.cu) and the
streaming ones (csrc/<op>/<op>_cuda_stream.cu, through $TALK_HF_UNVERIFIED_CUDA; depthwise_conv has
one kernel, run in the second pass), plus the streaming kernels' own edges: T = 1, a head of 6
channels (one channel a thread), x and the output gradient one element past a 16-byte boundary
(misaligned: one channel a thread), offsets up to 3 (window edges outside the prefix ring).  Each
case runs a second time on packed rows (documents of 1 and 2 tokens, about half the window and
longer than it), through the compiled ops with document edges, so that both sets' packed forms run
whatever the routing allows.  `benchmarks/gpu_suite.sh sanitize` runs it with the caching
allocator off, so that reads past an allocation are not hidden inside a pooled block.
"""

import os
import random

import torch

from talk_hf.ops import depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops.documents import document_edges
from talk_hf.ops.dynamic_conv.dynamic_compiled import compiled_dynamic_conv, compiled_light_conv
from talk_hf.ops.talk_conv.talk_compiled import compiled_talk_conv

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
# (T, C, H, max_left, max_right, offset scale): scale 1e4 clamps every edge, -1 reverses windows
TALK_SHAPES = (
    (300, 33, 3, 7, 9, 1.2),
    (130, 8, 2, 31, 0, 1.0),
    (129, 80, 2, 400, 3, 1.0),
    (500, 40, 4, 7, 5, 1e4),
    (90, 6, 3, 5, 4, -1.0),
    (7, 0, 2, 2, 2, 1.0),
)
CONV_SHAPES = ((3, 1, 200), (4, 3, 200), (31, 15, 200), (300, 150, 40), (31, 30, 1), (1, 0, 130))  # (K, padding_l, T)
# $TALK_HF_UNVERIFIED_CUDA of each kernel set
KERNEL_SETS = {"tiled": "", "stream": "talk_conv,dynamic_conv,light_conv,depthwise_conv"}
# (T, C, H, max_left, max_right, offset scale) of the streaming kernels' edges
STREAM_TALK_SHAPES = ((1, 16, 2, 3, 3, 1.0), (90, 18, 3, 4, 4, 1.0), (300, 64, 4, 7, 9, 3.0), (200, 64, 4, 15, 0, 1.0))
# (T, C, K, dilation, padding, gated) of depthwise_conv: a partial block of channels, dilated, K > T
DEPTHWISE_SHAPES = (
    (300, 70, 31, 1, "causal", False),
    (300, 70, 5, 4, "centred", True),
    (1, 16, 3, 1, "centred", True),
    (20, 33, 63, 1, "causal", False),
)


def packed_position_ids(x, window):
    """(B, T) positions of x's rows cut at random into documents of 1 and 2 tokens, about half the
    window and longer than it (the last one cut at T)."""
    rng = random.Random(x.shape[1])
    rows = []
    for _ in range(x.shape[0]):
        lengths = []
        while sum(lengths) < x.shape[1]:
            lengths.append(rng.choice([1, 2, max(1, window // 2), window + rng.randint(1, 2 * window)]))
        lengths[-1] -= sum(lengths) - x.shape[1]
        rows.append(torch.cat([torch.arange(n) for n in lengths if n > 0]))
    return torch.stack(rows).to(x.device)


def packed_edges(x, window):
    """The document edges (`documents.document_edges`) of `packed_position_ids`."""
    return document_edges(packed_position_ids(x, window), x)


def misaligned(tensor):
    """A contiguous copy of ``tensor`` that starts one element past a 16-byte boundary."""
    flat = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
    return flat[1:].view(tensor.shape).copy_(tensor)


def leaf(tensor):
    return tensor.detach().requires_grad_()


def main():
    torch.manual_seed(0)
    for kernels, variable in KERNEL_SETS.items():
        os.environ["TALK_HF_UNVERIFIED_CUDA"] = variable
        run_every_kernel()
        print(f"sanitize_kernels: the {kernels} kernels ran", flush=True)
    torch.cuda.synchronize()
    print("sanitize_kernels: every kernel ran")


def run_every_kernel():
    """Forward and backward of every op over the shapes above, in every dtype, aligned and
    misaligned, on whole rows and on packed ones."""
    for dtype in DTYPES:
        for length, channels, heads, max_left, max_right, scale in TALK_SHAPES + STREAM_TALK_SHAPES:
            x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
            left = torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale
            left[0, length // 2] = float("nan")  # one NaN offset: its edge falls back to row 0
            right = leaf(torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale) if max_right else None
            out = talk_conv(x, leaf(left), right, max_left, max_right, backend="cuda")
            out.backward(torch.randn_like(out))
            out = talk_conv(leaf(misaligned(x)), leaf(left), right, max_left, max_right, backend="cuda")
            out.backward(misaligned(torch.randn_like(out)))
            edges = packed_edges(x, max_left + max_right + 1)
            compiled_talk_conv(x, leaf(left), right, max_left, max_right, edges).sum().backward()
        for kernel_size, padding_l, length in CONV_SHAPES:
            for channels, heads in ((33, 3), (64, 4)):
                x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
                weight = leaf(torch.softmax(torch.randn(2, length, heads, kernel_size, device="cuda"), -1).to(dtype))
                dynamic_conv(x, weight, padding_l, backend="cuda").sum().backward()
                out = dynamic_conv(leaf(misaligned(x)), weight, padding_l, backend="cuda")
                out.backward(misaligned(torch.randn_like(out)))
                compiled_dynamic_conv(x, weight, padding_l, packed_edges(x, kernel_size)).sum().backward()
                weight = leaf(torch.softmax(torch.randn(heads, kernel_size, device="cuda"), -1).to(dtype))
                light_conv(x, weight, padding_l, backend="cuda").sum().backward()
                compiled_light_conv(x, weight, padding_l, packed_edges(x, kernel_size)).sum().backward()
        if os.environ["TALK_HF_UNVERIFIED_CUDA"]:  # depthwise_conv's one kernel runs behind the switch
            run_depthwise_kernel(dtype)


def run_depthwise_kernel(dtype):
    """depthwise_conv's forward and backward over DEPTHWISE_SHAPES, whole, misaligned and packed rows."""
    for length, channels, kernel_size, dilation, padding, gated in DEPTHWISE_SHAPES:
        x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
        weight = leaf(torch.randn(channels, kernel_size, device="cuda", dtype=dtype) / kernel_size)
        mask = torch.rand(2, length, device="cuda") > 0.2 if gated else None
        gate = dict(dilation=dilation, padding=padding, relu_input=gated, input_mask=mask, backend="cuda")
        depthwise_conv(x, weight, **gate).sum().backward()
        out = depthwise_conv(leaf(misaligned(x)), weight, **gate)
        out.backward(misaligned(torch.randn_like(out)))
        position_ids = packed_position_ids(x, kernel_size * dilation)
        depthwise_conv(x, weight, position_ids=position_ids, **gate).sum().backward()


if __name__ == "__main__":
    main()
