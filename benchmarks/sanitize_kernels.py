"""Drive every CUDA kernel through its edge paths, for compute-sanitizer (no checks of values: the
`gpu` tests compare them with the reference; this looks for out-of-bounds accesses and races).

    compute-sanitizer --tool memcheck  python benchmarks/sanitize_kernels.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_kernels.py

Covered, forward and backward, in float32/float16/bfloat16/float64: causal and bidirectional
talk_conv, a partial block of channels (C = 33), windows wider than one shared-memory pass, huge
(clamped), negative (reversed) and NaN offsets, zero channels; dynamic_conv and light_conv with
odd, even and K > T kernels; depthwise_conv causal, centred and dilated, with and without its input
gate.  Every case runs once through the ops on backend "cuda", on the kernels they run
(csrc/cuda_fallback.h: talk_conv's tiled forward, csrc/talk_conv/talk_conv_cuda.cu, and streaming
backward, talk_conv_cuda_stream.cu; dynamic_conv's and light_conv's streaming kernels,
csrc/dynamic_conv/dynamic_conv_cuda_stream.cu; depthwise_conv's one kernel), plus the streaming
kernels' own edges: T = 1, a head of 6 channels (one channel a thread), x and the output gradient
one element past a 16-byte boundary (misaligned: one channel a thread), offsets up to 3 (windows
past max_left and max_right).  Each case runs a second time on packed rows (documents of 1 and 2
tokens, about half the window and longer than it, through the ops' ``document_edges``).  The tiled
kernels that the streaming ones fall back to (shapes past 32-bit indices or the grid, too large to
reach here; conv kernels too wide for shared memory) are called directly too, on the talk_conv and
conv shapes, whole and packed: the CUDA extension's talk_backward_tiled, conv_forward_tiled and
conv_backward_tiled.
The candidate kernels that no GPU has verified yet (csrc/cuda_variants.h) run again, each switched on,
over shapes whose blocks' channels lie in one head (CANDIDATE_TALK_SHAPES).
`benchmarks/gpu_suite.sh sanitize` runs it with the caching allocator off, so that reads past an
allocation are not hidden inside a pooled block.
"""

import random

import torch

from talk_hf.ops import DocumentEdges, _extension, depthwise_conv, dynamic_conv, light_conv, talk_conv
from talk_hf.ops._cuda_variants import cuda_variants

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
# (T, C, H, max_left, max_right, offset scale) of the streaming kernels' edges
STREAM_TALK_SHAPES = ((1, 16, 2, 3, 3, 1.0), (90, 18, 3, 4, 4, 1.0), (300, 64, 4, 7, 9, 3.0), (200, 64, 4, 15, 0, 1.0))
# (T, C, H, max_left, max_right, offset scale) where each block's channels lie in one head (head size a
# multiple of 32): the shapes the candidate kernels take (csrc/cuda_variants.h), which run them again
# with each candidate on: a partial tile, reach wider than one shared-memory pass, causal, clamped and
# reversed windows, T = 1
CANDIDATE_TALK_SHAPES = (
    (300, 64, 2, 7, 9, 1.2),
    (129, 64, 1, 400, 3, 1.0),
    (130, 64, 2, 31, 0, 1.0),
    (500, 64, 1, 7, 5, 1e4),
    (90, 64, 2, 5, 4, -1.0),
    (1, 32, 1, 3, 3, 1.0),
)
# (T, C, K, dilation, padding, gated) of depthwise_conv: a partial block of channels, dilated, K > T
DEPTHWISE_SHAPES = (
    (300, 70, 31, 1, "causal", False),
    (300, 70, 5, 4, "centred", True),
    (1, 16, 3, 1, "centred", True),
    (20, 33, 63, 1, "causal", False),
)


def packed_edges(x, window):
    """The `DocumentEdges` of x's rows cut at random into documents of 1 and 2 tokens, about half the
    window and longer than it (the last one cut at T)."""
    rng = random.Random(x.shape[1])
    rows = []
    for _ in range(x.shape[0]):
        lengths = []
        while sum(lengths) < x.shape[1]:
            lengths.append(rng.choice([1, 2, max(1, window // 2), window + rng.randint(1, 2 * window)]))
        lengths[-1] -= sum(lengths) - x.shape[1]
        rows.append(torch.cat([torch.arange(n) for n in lengths if n > 0]))
    return DocumentEdges(torch.stack(rows).to(x.device))


def misaligned(tensor):
    """A contiguous copy of ``tensor`` that starts one element past a 16-byte boundary."""
    flat = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
    return flat[1:].view(tensor.shape).copy_(tensor)


def leaf(tensor):
    return tensor.detach().requires_grad_()


def main():
    torch.manual_seed(0)
    extension = _extension.load("cuda")
    for dtype in DTYPES:
        run_talk_kernels(dtype, extension, TALK_SHAPES + STREAM_TALK_SHAPES + CANDIDATE_TALK_SHAPES)
        run_conv_kernels(dtype, extension)
        run_depthwise_kernel(dtype)
        for candidate in extension.cuda_variant_names():
            with cuda_variants(extension, [candidate]):
                run_talk_kernels(dtype, extension, CANDIDATE_TALK_SHAPES)
            print(f"sanitize_kernels: {dtype}: candidate {candidate} ran", flush=True)
        torch.cuda.synchronize()
        print(f"sanitize_kernels: {dtype}: the ops' kernels and the tiled fallbacks ran", flush=True)
    print("sanitize_kernels: every kernel ran (the ops' kernels and the tiled fallbacks, whole and packed rows)")


def run_talk_kernels(dtype, extension, shapes):
    """talk_conv's forward and backward over ``shapes`` through the op, aligned, misaligned and
    packed; then the tiled backward of the CUDA `extension` directly, whole and packed."""
    for length, channels, heads, max_left, max_right, scale in shapes:
        x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
        left = torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale
        left[0, length // 2] = float("nan")  # one NaN offset: its edge falls back to row 0
        right = leaf(torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale) if max_right else None
        out = talk_conv(x, leaf(left), right, max_left, max_right, backend="cuda")
        out.backward(torch.randn_like(out))
        out = talk_conv(leaf(misaligned(x)), leaf(left), right, max_left, max_right, backend="cuda")
        out.backward(misaligned(torch.randn_like(out)))
        packed = packed_edges(x, max_left + max_right + 1)
        talk_conv(x, leaf(left), right, max_left, max_right, document_edges=packed, backend="cuda").sum().backward()
        with torch.no_grad():
            for edges in (None, packed.tensor):
                extension.talk_backward_tiled(torch.randn_like(x), x, left, right, max_left, max_right, edges)


def run_conv_kernels(dtype, extension):
    """dynamic_conv's and light_conv's forward and backward over CONV_SHAPES through the ops (dynamic
    also misaligned) and packed; then the tiled kernels of the CUDA `extension` directly, with
    a per-token weight and light_conv's shared one (zero batch and time strides), whole and packed."""
    for kernel_size, padding_l, length in CONV_SHAPES:
        for channels, heads in ((33, 3), (64, 4)):
            x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
            packed = packed_edges(x, kernel_size)
            weight = leaf(torch.softmax(torch.randn(2, length, heads, kernel_size, device="cuda"), -1).to(dtype))
            dynamic_conv(x, weight, padding_l, backend="cuda").sum().backward()
            out = dynamic_conv(leaf(misaligned(x)), weight, padding_l, backend="cuda")
            out.backward(misaligned(torch.randn_like(out)))
            dynamic_conv(x, weight, padding_l, document_edges=packed, backend="cuda").sum().backward()
            shared = leaf(torch.softmax(torch.randn(heads, kernel_size, device="cuda"), -1).to(dtype))
            light_conv(x, shared, padding_l, backend="cuda").sum().backward()
            light_conv(x, shared, padding_l, document_edges=packed, backend="cuda").sum().backward()
            with torch.no_grad():
                for edges in (None, packed.tensor):
                    for per_token, summed in ((weight, False), (shared.expand(2, length, heads, kernel_size), True)):
                        extension.conv_forward_tiled(x, per_token, padding_l, edges)
                        extension.conv_backward_tiled(torch.randn_like(x), x, per_token, padding_l, summed, edges)


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
        packed = packed_edges(x, kernel_size * dilation)
        depthwise_conv(x, weight, document_edges=packed, **gate).sum().backward()


if __name__ == "__main__":
    main()
