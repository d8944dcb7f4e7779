"""The definition of :func:`talk_hf.ops.dynamic_conv` as direct loops in float64: the sum
of the kernel taps (also :func:`talk_hf.ops.light_conv`'s, whose (H, K) kernel it takes as well).

Slow (Python loops) and meant to be obviously right: every backend of the op (PyTorch, C++, CUDA)
is tested against it, forward and backward.  Arguments are those of the op; the result is float64
whatever the input dtype.
"""

import torch


def naive_dynamic_conv(x, weight, padding_l):
    """out[b, t, c] = sum_k weight[b, t, c // R, k] * x[b, t + k - padding_l, c], zero outside [0, T)."""
    x = x.double()
    batch, length, channels = x.shape
    heads, kernel_size = weight.shape[-2], weight.shape[-1]
    if weight.dim() == 2:
        weight = weight.expand(batch, length, heads, kernel_size)
    weight = weight.double().repeat_interleave(channels // heads, dim=2)  # (B, T, C, K)
    out = torch.zeros_like(x)
    for t in range(length):
        for k in range(kernel_size):
            source = t + k - padding_l
            if 0 <= source < length:
                out[:, t] += weight[:, t, :, k] * x[:, source]
    return out
