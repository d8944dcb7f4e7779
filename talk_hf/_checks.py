"""The integer check that the operators' arguments and the configurations' fields share.

A leaf module: ``ops`` and ``models`` both import it, so neither depends on the other for it.
"""

from __future__ import annotations

from typing import Any


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
