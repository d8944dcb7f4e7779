"""TaLK convolution (Lioutas & Guo, ICML 2020): adaptive window sums from local prefix sums.

For token ``t`` and head ``h`` the window is ``[a, b + 1)`` with

    a = clamp(t - offset_left[t, h]  * max_left,  start[t], end[t])
    b = clamp(t + offset_right[t, h] * max_right, start[t], end[t])      (b = t when causal)

where ``[start[t], end[t]]`` is the row ``[0, T - 1]``, or in a packed row (``document_edges``, see
:mod:`..documents`) the document of t: a packed document computes what it computes alone.  The
offsets get no gradient where their edge is clamped, and the normaliser stays the constant K.

and the output is the integral of the step signal ``f(u) = x[floor(u)]`` over the window,
divided by the constant ``max_left + max_right + 1``.  Whole tokens inside the window count
once; the left edge token ``floor(a)`` counts ``1 - frac(a)``, the token after ``floor(b)``
counts ``frac(b)``.  With ``P[i] = x[0] + ... + x[i - 1]``:

    out[t] = (P[floor(b) + 1] - P[floor(a)] + frac(b) * x[floor(b) + 1] - frac(a) * x[floor(a)]) / K

This folder holds the op: the public function and its checks (here), its PyTorch path
(`talk_torch`), its compiled kernels' registration (`talk_compiled`, csrc/talk_conv/) and its
loop-form definition, which every backend is tested against (`talk_naive`).  `talk_conv_step` is
the causal form's one-token step: the last token's window as tap weights over its context.
"""

from __future__ import annotations

import torch

from .._backend import resolve_backend
from .._precision import accumulation_dtype
from .._taps import last_token_sum
from .._validation import (
    MAX_REACH,
    check_heads_divide_channels,
    check_int,
    check_leading_dims,
    check_same_device_and_dtype,
    check_tensor,
)
from ..documents import DocumentEdges, checked_edges
from .talk_compiled import compiled_talk_conv
from .talk_torch import talk_conv_torch


def talk_conv(
    x: torch.Tensor,
    offset_left: torch.Tensor,
    offset_right: torch.Tensor | None,
    max_left: int,
    max_right: int,
    *,
    document_edges: DocumentEdges | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Time-aware large-kernel convolution.

    Args:
        x: (B, T, C) input; padded positions must already be zero.
        offset_left: (B, T, H) relative left reach of each token's window, >= 0 (normally a
            sigmoid output in [0, 1]; dropout may push it above 1).  H must divide C; head ``h``
            owns channels ``h*C/H .. (h+1)*C/H - 1``.
        offset_right: (B, T, H) relative right reach, or ``None`` for the causal form
            (required exactly when ``max_right > 0``).
        max_left: maximum left reach in tokens (int in [0, 2**31 - 1]).
        max_right: maximum right reach in tokens (int in [0, 2**31 - 1]; 0 means causal).
        document_edges: None, or the `DocumentEdges` of a packed row (B, T) on x's device, derived
            from its position_ids: windows stop at each token's document's edges.
        backend: ``"auto"``, ``"torch"``, ``"cpu"`` or ``"cuda"`` (see :mod:`._backend`); ``None``
            reads ``$TALK_HF_BACKEND``.  Only the ``"torch"`` path rejects negative or NaN offsets
            (also a compiled backend's backward with ``create_graph=True``, which differentiates
            it); the compiled kernels read any value safely (see ``csrc/talk_math.h``).

    Returns:
        (B, T, C) tensor of x's dtype.  Gradients flow to x and both offsets.
    """
    _check_talk_args(x, offset_left, offset_right, max_left, max_right)
    edges = checked_edges(document_edges, x)
    if resolve_backend(backend, x.device) == "torch":
        return talk_conv_torch(x, offset_left, offset_right, max_left, max_right, edges)
    return compiled_talk_conv(x, offset_left, offset_right, max_left, max_right, edges)


def talk_conv_step(context: torch.Tensor, offset_left: torch.Tensor, max_left: int) -> torch.Tensor:
    """Causal `talk_conv` at the last row of ``context`` only: a decoding step, in O(K C).

    Token t's window covers ``reach = offset_left * max_left`` tokens before it: tap j (the token j
    rows back) weighs ``clamp(reach - j + 1, 0, 1)``, that is 1 inside, ``1 - frac`` at the
    fractional left edge, 0 beyond it; a window reaching past the context's first row stops there, as
    `talk_conv`'s stops at the row's start.  Divided by ``max_left + 1``, as `talk_conv`.

    Args:
        context: (B, K, C) the token's K - 1 previous inputs (zeros before the start), then its own.
        offset_left: (B, 1, H) the token's relative left reach (H divides C).
        max_left: maximum left reach in tokens.

    Returns:
        (B, 1, C) of context's dtype: what ``talk_conv(context, offsets, None, max_left, 0)[:, -1:]``
        gives, with ``offsets`` the token's at the last row.
    """
    check_tensor("context", context, 3, "(B, K, C)")
    check_tensor("offset_left", offset_left, 3, "(B, 1, H)")
    if offset_left.shape[:2] != (context.shape[0], 1):
        raise ValueError(
            f"offset_left must have shape (B, 1, H) with B = {context.shape[0]}, got {tuple(offset_left.shape)}"
        )
    check_heads_divide_channels(context.shape[2], offset_left.shape[2], "offset_left.shape[-1]")
    check_int("max_left", max_left, 0, MAX_REACH)
    check_same_device_and_dtype("context", context, offset_left=offset_left)
    dtype = accumulation_dtype(context.dtype)
    norm = max_left + 1
    # clamp(reach - j + 1, 0, 1) / norm with the division folded into the constants: a multiply, an add
    # and a clamp (the traced step's fewest nodes).  1 - j for the taps, oldest row first: (K,).
    one_minus_rows_back = torch.arange(2 - context.shape[1], 2, device=context.device, dtype=dtype)
    reach_share = offset_left.to(dtype).transpose(1, 2) * (max_left / norm)  # (B, H, 1): reach / norm
    kernel = (reach_share + one_minus_rows_back / norm).clamp(0.0, 1.0 / norm)  # (B, H, K)
    return last_token_sum(context, kernel)


def _check_talk_args(x, offset_left, offset_right, max_left, max_right) -> None:
    check_tensor("x", x, 3, "(B, T, C)")
    check_tensor("offset_left", offset_left, 3, "(B, T, H)")
    check_leading_dims("offset_left", offset_left, x, 2)
    check_heads_divide_channels(x.shape[2], offset_left.shape[2], "offset_left.shape[-1]")
    check_int("max_left", max_left, 0, MAX_REACH)
    check_int("max_right", max_right, 0, MAX_REACH)
    if max_right == 0 and offset_right is not None:
        raise ValueError(
            "offset_right must be None when max_right == 0 (causal TaLK); pass max_right > 0 for the bidirectional form"
        )
    if max_right > 0:
        if offset_right is None:
            raise ValueError(f"offset_right of shape (B, T, H) is required when max_right={max_right} > 0")
        check_tensor("offset_right", offset_right, 3, "(B, T, H)")
        if offset_right.shape != offset_left.shape:
            raise ValueError(
                f"offset_right must have the shape of offset_left {tuple(offset_left.shape)}, "
                f"got {tuple(offset_right.shape)}"
            )
    check_same_device_and_dtype("x", x, offset_left=offset_left, offset_right=offset_right)
