"""The definitions of the mixing operators, as direct loops in float64.

Each function here states its operator the plainest way: ``naive_talk_conv`` integrates the step
signal over each token's window, token by token; ``naive_dynamic_conv`` sums the kernel taps.  They
are slow (Python loops over batch, time and heads) and exist to be obviously right: every backend
of :func:`talk_hf.ops.talk_conv`, :func:`talk_hf.ops.dynamic_conv`, :func:`talk_hf.ops.light_conv`
and :func:`talk_hf.ops.depthwise_conv` (PyTorch, C++, CUDA) is tested against them, forward and
backward.
Arguments are those of the fast ops; the result is float64 whatever the input dtype.
"""

import torch


def naive_talk_conv(x, offset_left, offset_right, max_left, max_right):
    """out[b, t, head h] = (1/K) * sum_j |[a, b+1) ∩ [j, j+1)| * x[b, j, channels of h]."""
    x = x.double()
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    head_size = channels // heads
    out = torch.zeros_like(x)
    token_starts = torch.arange(length, dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            for h in range(heads):
                a = min(max(t - float(offset_left[b, t, h]) * max_left, 0.0), length - 1.0)
                right = t if offset_right is None else t + float(offset_right[b, t, h]) * max_right
                end = min(max(right, 0.0), length - 1.0) + 1.0
                overlap = (torch.clamp(token_starts + 1, max=end) - torch.clamp(token_starts, min=a)).clamp(min=0)
                channels_of_h = slice(h * head_size, (h + 1) * head_size)
                out[b, t, channels_of_h] = overlap @ x[b, :, channels_of_h]
    return out / (max_left + max_right + 1)


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
