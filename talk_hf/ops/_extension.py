"""Loading the compiled backends into the process: each once, on first use, with a safe fallback.

:func:`load` returns the module of ``"cpu"`` or ``"cuda"`` (``csrc/``), found or built by
:mod:`._build` (see there for the build folder, the checks, the completion records and the build
lock), and remembers the outcome, module or :class:`ExtensionUnavailable`, for the process.
Nothing is built at import.  :func:`warn_fallback` turns an :class:`ExtensionUnavailable` into one
:class:`BackendFallbackWarning` per process and extension, for the "auto" backend.

The names the ops, ``python -m talk_hf.ops.build`` and the tests use are importable from here.
"""

from __future__ import annotations

import threading
import warnings
from types import ModuleType

from . import _cuda_variants
from ._build.build_folder import BUILD_DIR_ENV, PORTABLE_CPU_ENV, build_directory, source_digest
from ._build.build_lock import LOCK_TIMEOUT_ENV
from ._build.build_lock import build as _build  # bound here, where tests count its calls
from ._build.build_record import is_built
from ._build.build_tools import check_build_tools, check_loadable, preflight
from ._build.unavailable import ExtensionUnavailable

__all__ = [
    "BUILD_DIR_ENV",
    "LOCK_TIMEOUT_ENV",
    "PORTABLE_CPU_ENV",
    "BackendFallbackWarning",
    "ExtensionUnavailable",
    "build_directory",
    "check_build_tools",
    "check_loadable",
    "is_built",
    "load",
    "preflight",
    "source_digest",
    "warn_fallback",
]

_results: dict[str, ModuleType | ExtensionUnavailable] = {}
_results_guard = threading.Lock()
_warned: set[str] = set()


class BackendFallbackWarning(UserWarning):
    """Issued once per process and extension when "auto" falls back to the PyTorch path."""


def load(kind: str) -> ModuleType:
    """The compiled module for ``kind`` ("cpu" or "cuda"), built on first use.

    The outcome, module or :class:`ExtensionUnavailable`, is remembered for the process: a failed
    build is not retried on every call.  The CUDA module gets the candidate kernels that
    ``$TALK_HF_CUDA_VARIANTS`` names switched on (:mod:`._cuda_variants`).
    """
    with _results_guard:
        if kind not in _results:
            try:
                module = _build(kind)
                if kind == "cuda":
                    _cuda_variants.apply_environment(module)  # a wrong name raises, and is not remembered
                _results[kind] = module
            except ExtensionUnavailable as error:
                _results[kind] = error
        result = _results[kind]
    if isinstance(result, ExtensionUnavailable):
        raise result
    return result


def warn_fallback(error: ExtensionUnavailable) -> None:
    """Warn, once per process and extension kind, that "auto" runs the PyTorch path instead."""
    if error.kind in _warned:
        return
    _warned.add(error.kind)
    warnings.warn(
        f"talk_hf runs its PyTorch path on {error.kind} tensors: {error}. "
        "Set TALK_HF_BACKEND=torch to choose it explicitly and silence this warning.",
        BackendFallbackWarning,
        stacklevel=5,  # warn_fallback, auto_extension, the op's backend choice, the op: its caller
    )
