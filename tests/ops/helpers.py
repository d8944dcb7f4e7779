"""Inputs and tolerances shared by the operator tests."""

import torch

# Tolerances (atol, rtol) of each dtype against the float64 definition, for inputs of unit scale.
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def offsets_off_the_grid(shape, max_offset, dtype=torch.float64, generator=None):
    """Relative offsets in (0, 1) whose window edges t -/+ offset * max_offset sit at least 0.1
    tokens away from an integer, where the derivative would be one-sided (safe for gradcheck)."""
    if max_offset == 0:
        return torch.rand(shape, dtype=dtype, generator=generator)
    whole = torch.randint(0, max_offset, shape, generator=generator).to(dtype)
    fraction = 0.1 + 0.8 * torch.rand(shape, dtype=dtype, generator=generator)
    return (whole + fraction) / max_offset


def assert_close_to_reference(actual, expected, dtype, scale=1.0):
    """Compare a result computed in ``dtype`` with the float64 definition."""
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol * scale, rtol=rtol)
