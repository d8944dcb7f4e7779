"""The definition of :func:`talk_hf.ops.depthwise_conv` as direct loops in float64: the
sum of the dilated kernel taps.

Slow (Python loops) and meant to be obviously right: every backend of the op (PyTorch, C++, CUDA)
is tested against it, forward and backward.  Arguments are those of the op; the result is float64
whatever the input dtype.
"""

import torch

from ..documents_naive import naive_reads_inside


def naive_depthwise_conv(x, weight, dilation, left, position_ids=None):
    """out[b, t, c] = sum_k weight[c, k] * x[b, t + k * dilation - left, c], zero outside [0, T)
    (with ``position_ids``: outside the document of t).

    ``left`` is how many steps before t the first tap reads: (K - 1) * dilation for the causal
    form, (K // 2) * dilation for the centred one.
    """
    x = x.double()
    batch, length = x.shape[:2]
    weight = weight.double()
    out = torch.zeros_like(x)
    for t in range(length):
        for k in range(weight.shape[1]):
            source = t + k * dilation - left
            inside = naive_reads_inside(position_ids, t, source, batch, length)
            if inside.any():
                out[:, t] += torch.where(inside, weight[:, k] * x[:, source], 0.0)
    return out
