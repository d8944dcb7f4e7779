"""The definition of :func:`talk_hf.ops.talk_conv` as direct loops in float64: each
token's window integral of the step signal, token by token.

Slow (Python loops) and meant to be obviously right: every backend of the op (PyTorch, C++, CUDA)
is tested against it, forward and backward.  Arguments are those of the op; the result is float64
whatever the input dtype.
"""

import torch

from ..documents_naive import naive_document_span


def naive_talk_conv(x, offset_left, offset_right, max_left, max_right, position_ids=None):
    """out[b, t, head h] = (1/K) * sum_j |[a, b+1) ∩ [j, j+1)| * x[b, j, channels of h], the window's
    edges a and b clamped into the document of t (its row without ``position_ids``)."""
    x = x.double()
    batch, length, channels = x.shape
    heads = offset_left.shape[2]
    head_size = channels // heads
    out = torch.zeros_like(x)
    token_starts = torch.arange(length, dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            first, last = naive_document_span(position_ids, b, t, length)
            for h in range(heads):
                a = min(max(t - float(offset_left[b, t, h]) * max_left, first), last)
                right = t if offset_right is None else t + float(offset_right[b, t, h]) * max_right
                end = min(max(right, first), last) + 1.0
                overlap = (torch.clamp(token_starts + 1, max=end) - torch.clamp(token_starts, min=a)).clamp(min=0)
                channels_of_h = slice(h * head_size, (h + 1) * head_size)
                out[b, t, channels_of_h] = overlap @ x[b, :, channels_of_h]
    return out / (max_left + max_right + 1)
