"""Drive every CUDA kernel through its edge paths, for compute-sanitizer (no checks of values: the
`gpu` tests compare them with the reference; this looks for out-of-bounds accesses and races).

    compute-sanitizer --tool memcheck  python benchmarks/sanitize_kernels.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_kernels.py

Covered, forward and backward, in float32/float16/bfloat16/float64: causal and bidirectional
talk_conv, a partial block of channels (C = 33), windows wider than one shared-memory pass, huge
(clamped), negative (reversed) and NaN offsets, zero channels; dynamic_conv and light_conv with
odd, even and K > T kernels.  `benchmarks/gpu_suite.sh sanitize` runs it with the caching
allocator off, so that reads past an allocation are not hidden inside a pooled block.
"""

import torch

from talk_hf.ops import dynamic_conv, light_conv, talk_conv

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
CONV_SHAPES = ((3, 1, 200), (4, 3, 200), (31, 15, 200), (300, 150, 40))  # (K, padding_l, T)


def leaf(tensor):
    return tensor.detach().requires_grad_()


def main():
    torch.manual_seed(0)
    for dtype in DTYPES:
        for length, channels, heads, max_left, max_right, scale in TALK_SHAPES:
            x = leaf(torch.randn(2, length, channels, device="cuda", dtype=dtype))
            left = torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale
            left[0, length // 2] = float("nan")  # one NaN offset: its edge falls back to row 0
            right = leaf(torch.rand(2, length, heads, device="cuda", dtype=dtype) * scale) if max_right else None
            out = talk_conv(x, leaf(left), right, max_left, max_right, backend="cuda")
            out.backward(torch.randn_like(out))
        for kernel_size, padding_l, length in CONV_SHAPES:
            x = leaf(torch.randn(2, length, 33, device="cuda", dtype=dtype))
            weight = leaf(torch.softmax(torch.randn(2, length, 3, kernel_size, device="cuda"), -1).to(dtype))
            dynamic_conv(x, weight, padding_l, backend="cuda").sum().backward()
            weight = leaf(torch.softmax(torch.randn(3, kernel_size, device="cuda"), -1).to(dtype))
            light_conv(x, weight, padding_l, backend="cuda").sum().backward()
    torch.cuda.synchronize()
    print("sanitize_kernels: every kernel ran")


if __name__ == "__main__":
    main()
