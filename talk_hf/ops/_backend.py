"""Choice of the implementation ("backend") that runs an operator.

Only the pure-PyTorch path exists so far; the CUDA extension plugs in here.
"""

from __future__ import annotations

KNOWN_BACKENDS = ("auto", "torch")


def resolve_backend(requested: str) -> str:
    """Map the user's ``backend=`` argument to the backend that will run.

    Args:
        requested: ``"auto"`` (the fastest available) or ``"torch"`` (the PyTorch reference).

    Returns:
        The name of the backend to run, currently always ``"torch"``.
    """
    if requested not in KNOWN_BACKENDS:
        raise ValueError(f"backend must be one of {KNOWN_BACKENDS}, got {requested!r}")
    return "torch"
