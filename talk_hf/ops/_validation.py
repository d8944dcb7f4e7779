"""Argument checks shared by the mixing operators, and the integer check (`check_int`) that the
configurations' fields share with them (``talk_hf.models`` imports it from here).

Every check raises a ``ValueError`` (``TypeError`` for wrong Python types) whose message names
the argument and says what was expected, so that a bad call fails before any kernel runs.
"""

from __future__ import annotations

from typing import Any

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The largest reach (TaLK's max_left / max_right) the kernels take: their 32-bit index range.
MAX_REACH = 2**31 - 1


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    """Require a Python int (not a bool) in ``[minimum, maximum]`` (no upper bound when ``maximum`` is None).

    Raises:
        TypeError: ``value`` is not an int; the message names ``name`` and shows the value.
        ValueError: ``value`` is out of bounds; the message names ``name`` and the bound it crosses.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")


def runs_value_checks(tensor: torch.Tensor) -> bool:
    """Whether checks of ``tensor``'s values (one host sync each) run: not while ``torch.compile``
    traces, nor while a CUDA graph captures ``tensor``'s stream (a sync would break the capture), nor
    under a ``torch.func`` transform (``vmap`` cannot read a value back), nor for a meta tensor (it
    has no values)."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active() or tensor.is_meta:
        return False
    return not (tensor.is_cuda and torch.cuda.is_current_stream_capturing())


def check_tensor(name: str, value, ndim: int, shape_doc: str) -> None:
    """Require a floating-point tensor of rank ``ndim``; ``shape_doc`` describes the shape."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape_doc}, got {type(value).__name__}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have shape {shape_doc} ({ndim} dims), got shape {tuple(value.shape)}")
    if value.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be float16, bfloat16, float32 or float64, got {value.dtype}")


def check_same_device_and_dtype(reference_name: str, reference: torch.Tensor, **others) -> None:
    """Require every tensor in ``others`` to share ``reference``'s device and dtype."""
    for name, other in others.items():
        if other is None:
            continue
        if other.device != reference.device:
            raise ValueError(
                f"{name} is on {other.device} but {reference_name} is on {reference.device}; "
                "move them to the same device"
            )
        if other.dtype != reference.dtype:
            raise ValueError(
                f"{name} has dtype {other.dtype} but {reference_name} has dtype {reference.dtype}; "
                "cast them to the same dtype"
            )


def check_heads_divide_channels(channels: int, heads: int, heads_from: str) -> None:
    """Require ``heads >= 1`` and ``channels % heads == 0`` (heads own contiguous channel blocks)."""
    if heads < 1:
        raise ValueError(f"{heads_from} must have at least one head, got {heads}")
    if channels % heads != 0:
        raise ValueError(
            f"the channel count C={channels} of x must be divisible by the number of heads "
            f"H={heads} (taken from {heads_from})"
        )


def check_leading_dims(name: str, value: torch.Tensor, x: torch.Tensor, count: int) -> None:
    """Require ``value.shape[:count] == x.shape[:count]`` (batch and time must match x)."""
    if value.shape[:count] != x.shape[:count]:
        raise ValueError(
            f"{name} must match x in its first {count} dims {tuple(x.shape[:count])}, got shape {tuple(value.shape)}"
        )
