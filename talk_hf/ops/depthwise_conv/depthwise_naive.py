"""The definition of :func:`talk_hf.ops.depthwise_conv` as direct loops in float64: the
sum of the dilated kernel taps.

Slow (Python loops) and meant to be obviously right: every backend of the op (PyTorch, C++, CUDA)
is tested against it, forward and backward.  Arguments are those of the op; the result is float64
whatever the input dtype.
"""

import torch


def naive_depthwise_conv(x, weight, dilation, left):
    """out[b, t, c] = sum_k weight[c, k] * x[b, t + k * dilation - left, c], zero outside [0, T).

    ``left`` is how many steps before t the first tap reads: (K - 1) * dilation for the causal
    form, (K // 2) * dilation for the centred one.
    """
    x = x.double()
    length = x.shape[1]
    weight = weight.double()
    out = torch.zeros_like(x)
    for t in range(length):
        for k in range(weight.shape[1]):
            source = t + k * dilation - left
            if 0 <= source < length:
                out[:, t] += weight[:, k] * x[:, source]
    return out
