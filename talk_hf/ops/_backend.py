"""Choice of the implementation ("backend") that runs an operator, and the switch for unverified
CUDA kernels.

* ``"torch"``: the pure-PyTorch reference, on any device;
* ``"cpu"``: the compiled C++ kernels (``csrc/<op>/*_cpu.cpp``), CPU tensors only;
* ``"cuda"``: the compiled CUDA kernels (``csrc/<op>/*_cuda*.cu``), CUDA tensors only;
* ``"auto"``: the compiled backend of the tensors' device when it builds and loads, otherwise the
  PyTorch path with one warning per process saying why (see :mod:`._extension`).

An op's ``backend=None`` (the default) reads ``$TALK_HF_BACKEND`` (default ``"auto"``); an
explicit ``backend=`` argument wins over the variable.  Inside a model's forward (decorated with
`reads_backend_once`) the variable is read once, when the forward starts, for all its ops.  Asking
for ``"cpu"`` or ``"cuda"`` where that extension cannot load raises
:class:`._extension.ExtensionUnavailable`.

The switch: a new or rewritten CUDA kernel is compiled in CI (``.ci/compile_cuda``) but stays off
until a lent GPU has run its ``gpu`` tests and compute-sanitizer on it (``benchmarks/gpu_suite.sh``).
Each op declares such kernels (:class:`._compiled_op.CompiledOp`'s ``unverified_cuda``), and runs
them only where ``$TALK_HF_UNVERIFIED_CUDA`` names the op: a comma-separated list of op names (e.g.
``depthwise_conv,talk_conv``), or ``all``; unset or empty names none.  Off, the op runs its verified
fallback: its verified CUDA kernel where it has one, else the PyTorch path (and backend ``"cuda"``
is an error).  The variable is read at each call (under ``torch.compile``: once, while tracing).

Today talk_conv's streaming kernels and depthwise_conv's kernel are behind the switch; dynamic_conv
and light_conv run their streaming kernels by default (a GPU has verified them), and the switch
only adds their packed form (below), which compute-sanitizer has not yet run.

Packed rows (an op called with ``position_ids``): every CUDA kernel takes document edges, but each op
declares the kernel sets that packed calls run on: today only the ones behind the switch, since no
sanitizer has run a packed form yet (talk_conv's tiled kernels are not declared at all).  On CUDA
tensors a packed call runs the compiled kernels only where the set the switch picks is declared
so; otherwise ``"auto"`` runs the PyTorch path and ``"cuda"`` is an error.
"""

from __future__ import annotations

import functools
import os
from contextvars import ContextVar
from types import ModuleType

import torch

from . import _extension

KNOWN_BACKENDS = ("auto", "torch", "cpu", "cuda")
BACKEND_ENV = "TALK_HF_BACKEND"
UNVERIFIED_CUDA_ENV = "TALK_HF_UNVERIFIED_CUDA"

# The ops with unverified CUDA kernels, each with whether it also has a verified one to fall back
# on (filled by the ops' declarations, `declare_unverified_cuda`).
_unverified_cuda_ops: dict[str, bool] = {}

# The ops whose CUDA kernels run packed rows (document edges): op -> (whether its verified kernels do,
# whether its unverified ones do) (filled by `declare_packed_cuda`; an op not named runs none).
_packed_cuda_ops: dict[str, tuple[bool, bool]] = {}

# $TALK_HF_BACKEND as read when the running model forward started, or None outside one.
_backend_of_this_forward: ContextVar[str | None] = ContextVar("talk_hf_backend_of_this_forward", default=None)


def requested_backend(backend: str | None) -> str:
    """The backend asked for: ``backend`` itself, or ``$TALK_HF_BACKEND`` when it is ``None`` (as
    read when the running `reads_backend_once` forward started, if any)."""
    if backend is not None:
        return _known("backend", backend)
    return _backend_of_this_forward.get() or _environment_backend()


def _environment_backend() -> str:
    return _known(f"${BACKEND_ENV}", os.environ.get(BACKEND_ENV) or "auto")


def _known(source: str, backend: str) -> str:
    if backend not in KNOWN_BACKENDS:
        raise ValueError(f"{source} must be one of {KNOWN_BACKENDS}, got {backend!r}")
    return backend


def reads_backend_once(forward):
    """Decorate a model's ``forward``: its ops read ``$TALK_HF_BACKEND`` once, when it starts, not at
    every call (a decoding step makes ~40 op calls, and each read of the environment costs
    microseconds).  A forward inside another keeps the outer one's reading; under
    ``torch.compile`` the ops read it while tracing, as without the decorator."""

    @functools.wraps(forward)
    def forward_reading_the_backend_once(*args, **kwargs):
        if torch.compiler.is_compiling() or _backend_of_this_forward.get() is not None:
            return forward(*args, **kwargs)
        token = _backend_of_this_forward.set(_environment_backend())
        try:
            return forward(*args, **kwargs)
        finally:
            _backend_of_this_forward.reset(token)

    return forward_reading_the_backend_once


def auto_extension(kind: str) -> ModuleType | None:
    """What ``"auto"`` runs on ``kind`` ("cpu" or "cuda") tensors: the compiled module (built on first
    use), or None for the PyTorch path, with one warning per process saying why."""
    try:
        return _extension.load(kind)
    except _extension.ExtensionUnavailable as error:
        _extension.warn_fallback(error)
        return None


def declare_unverified_cuda(op: str, *, has_verified_kernel: bool) -> None:
    """Record that ``op`` has CUDA kernels behind the switch, and whether it has verified ones."""
    _unverified_cuda_ops[op] = has_verified_kernel


def declare_packed_cuda(op: str, *, verified: bool, unverified: bool) -> None:
    """Record which of ``op``'s CUDA kernel sets run packed rows (document edges)."""
    _packed_cuda_ops[op] = (verified, unverified)


def runs_unverified_cuda(op: str) -> bool:
    """Whether ``op``'s CUDA calls run its unverified kernels: it has some, and the switch names it
    or it has no verified ones."""
    has_verified_kernel = _unverified_cuda_ops.get(op)
    return has_verified_kernel is not None and (not has_verified_kernel or unverified_cuda_enabled(op))


def cuda_takes_packed_rows(op: str) -> bool:
    """Whether the CUDA kernels that ``op`` runs now (`runs_unverified_cuda`) run packed rows."""
    verified, unverified = _packed_cuda_ops.get(op, (False, False))
    return unverified if runs_unverified_cuda(op) else verified


@torch.compiler.assume_constant_result
def unverified_cuda_enabled(op: str) -> bool:
    """Whether ``$TALK_HF_UNVERIFIED_CUDA`` turns on ``op``'s unverified CUDA kernels.

    Raises:
        ValueError: ``op`` has no unverified CUDA kernels, or the variable names something other
            than such ops and ``all`` (a misspelt name would otherwise silently keep the kernels off).
    """
    known = tuple(_unverified_cuda_ops)
    if op not in known:
        raise ValueError(f"op must be one of {known}, got {op!r}")
    names = {name.strip() for name in os.environ.get(UNVERIFIED_CUDA_ENV, "").split(",")} - {""}
    unknown = names - {"all", *known}
    if unknown:
        raise ValueError(
            f"${UNVERIFIED_CUDA_ENV} must be 'all' or a comma-separated list of {known}, "
            f"got unknown name(s) {sorted(unknown)}"
        )
    return "all" in names or op in names


@torch.compiler.assume_constant_result
def resolve_backend(backend: str | None, device: torch.device, op: str | None = None, packed: bool = False) -> str:
    """Map the user's choice to the backend that runs ``op`` on tensors of ``device``.

    Under ``torch.compile`` this runs once, while tracing, and its answer is baked into the graph.
    ``op`` (None: any op with verified kernels) matters on CUDA only: an op whose CUDA kernels are
    all unverified runs the PyTorch path there under ``"auto"`` unless the switch names it.  So
    does a ``packed`` call (it has document edges) where the CUDA kernels the switch picks for ``op``
    are not declared to run them (`cuda_takes_packed_rows`).

    Returns:
        ``"torch"``, ``"cpu"`` or ``"cuda"``; the compiled module of the last two is loaded.

    Raises:
        ValueError: ``"cuda"`` for an op whose CUDA kernels are unverified and switched off, or
            for a packed call those kernels do not run.
    """
    requested = requested_backend(backend)
    if requested == "torch":
        return "torch"
    if packed and device.type == "cuda" and requested in ("auto", "cuda") and not cuda_takes_packed_rows(op):
        if requested == "cuda":
            raise ValueError(
                f"backend 'cuda' of {op} cannot run packed sequences (position_ids) on its verified CUDA kernels "
                f"yet (no GPU has run their packed form); set {UNVERIFIED_CUDA_ENV}={op} (or all) for the "
                "kernels that run them, not yet run on a GPU either, or use backend 'auto' or 'torch'"
            )
        return "torch"
    if device.type == "cuda" and _unverified_cuda_ops.get(op) is False and not unverified_cuda_enabled(op):
        if requested == "cuda":
            raise ValueError(
                f"backend 'cuda' of {op} runs a CUDA kernel that no GPU has verified yet; set "
                f"{UNVERIFIED_CUDA_ENV}={op} (or all) to run it anyway, or use backend 'auto' or 'torch'"
            )
        return "torch"
    if requested == "auto":
        if device.type not in ("cpu", "cuda"):
            return "torch"
        return device.type if auto_extension(device.type) is not None else "torch"
    _extension.load(requested)
    if device.type != requested:
        raise ValueError(f"backend {requested!r} runs on {requested} tensors, but x is on {device}")
    return requested


def prepare_backend(device: torch.device | str, backend: str | None = None) -> str:
    """Build (on first use) and load now the compiled kernels that ops on ``device`` tensors will run.

    Call it before a timed loop or a latency-sensitive service: a first-use compile takes a minute or
    more and would otherwise land inside the first step.  ``backend`` as for the ops (``None``: read
    ``$TALK_HF_BACKEND``); under ``"auto"`` a backend that cannot load falls back with the ops' one
    warning, and a compiled backend asked for by name that cannot load raises.

    Returns:
        The backend that ops on ``device`` tensors will run: ``"torch"``, ``"cpu"`` or ``"cuda"``.
    """
    return resolve_backend(backend, torch.device(device))
