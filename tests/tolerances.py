"""Comparing whole sets of gradients (or weights) computed with different summation orders.

Sharding, compiling, another device or another thread count sum the same float32 terms in another
order. Each entry's rounding error is then on the scale of the terms it sums, not of its own
value: a gradient that is zero in exact arithmetic (the key bias of an attention, which shifts
every score of a query equally) comes out as pure rounding noise, and a tolerance relative to that
tensor alone compares noise with noise. So every tensor is compared with ``rtol`` of its own
largest entry plus a noise floor on the scale of the largest entry of the whole set, whose terms
are of the same size; a real bug (a weight sharded twice, a dropped term) is off by the tensor's
own scale.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

# A float32 sum of a few hundred terms, repeated over a few optimizer steps, stays well below a
# thousand rounding units of its largest term.
NOISE_FLOOR = 1e3 * torch.finfo(torch.float32).eps


def largest_entry(tensors: Mapping[str, torch.Tensor]) -> float:
    """The largest absolute entry over every tensor of ``tensors``."""
    return max(tensor.detach().abs().max().item() for tensor in tensors.values() if tensor.numel())


def assert_tensor_sets_close(
    actual: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], *, rtol: float, context: str = ""
) -> None:
    """Every tensor of ``expected`` matches the one of the same name in ``actual``.

    Tolerance of the tensor named ``n``: ``rtol`` × its own largest entry + :data:`NOISE_FLOOR` ×
    the largest entry of all of ``expected``. A failure names ``context`` and the tensor and keeps
    torch's own report (the greatest differences and where they are).
    """
    assert actual.keys() == expected.keys(), f"{context}: names differ: {sorted(actual.keys() ^ expected.keys())}"
    floor = NOISE_FLOOR * largest_entry(expected)
    for name, want in expected.items():
        own_scale = want.detach().abs().max().item() if want.numel() else 0.0
        torch.testing.assert_close(
            actual[name],
            want,
            rtol=rtol,
            atol=rtol * own_scale + floor,
            msg=lambda details, name=name: f"{context}: {name} (noise floor {floor:.3g})\n{details}",
        )
