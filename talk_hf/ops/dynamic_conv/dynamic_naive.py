"""The definition of :func:`talk_hf.ops.dynamic_conv` as direct loops in float64: the sum
of the kernel taps (also :func:`talk_hf.ops.light_conv`'s, whose (H, K) kernel it takes as well).

Slow (Python loops) and meant to be obviously right: every backend of the op (PyTorch, C++, CUDA)
is tested against it, forward and backward.  Arguments are those of the op; the result is float64
whatever the input dtype.
"""

import torch

from ..documents_naive import naive_reads_inside


def naive_dynamic_conv(x, weight, padding_l, position_ids=None):
    """out[b, t, c] = sum_k weight[b, t, c // R, k] * x[b, t + k - padding_l, c], zero outside [0, T)
    (with ``position_ids``: outside the document of t)."""
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
            inside = naive_reads_inside(position_ids, t, source, batch, length)
            if inside.any():
                out[:, t] += torch.where(inside, weight[:, t, :, k] * x[:, source], 0.0)
    return out
