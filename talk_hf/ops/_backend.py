"""Choice of the implementation ("backend") that runs an operator.

* ``"torch"``: the pure-PyTorch reference, on any device;
* ``"cpu"``: the compiled C++ kernels (``csrc/<op>/*_cpu.cpp``), CPU tensors only;
* ``"cuda"``: the compiled CUDA kernels (``csrc/<op>/*_cuda*.cu``), CUDA tensors only;
* ``"auto"``: the compiled backend of the tensors' device when it builds and loads, otherwise the
  PyTorch path with one warning per process saying why (see :mod:`._extension`).

An op's ``backend=None`` (the default) reads ``$TALK_HF_BACKEND`` (default ``"auto"``); an
explicit ``backend=`` argument wins over the variable.  Inside a model's forward (decorated with
`reads_backend_once`) the variable is read once, when the forward starts, for all its ops.  Asking
for ``"cpu"`` or ``"cuda"`` where that extension cannot load raises
:class:`._extension.ExtensionUnavailable`.  Every compiled kernel takes packed rows (document
edges) as well as whole ones.

While a model is exported (`exporting`: ``torch.export``, which ``torch.onnx.export(dynamo=True)`` runs)
every op takes the PyTorch path, whatever was asked: a graph holds its ATen operations, while the
compiled kernels (and the few-row ``linear``) would be opaque nodes no ONNX runtime has.
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

# $TALK_HF_BACKEND as read when the running model forward started, or None outside one.
_backend_of_this_forward: ContextVar[str | None] = ContextVar("talk_hf_backend_of_this_forward", default=None)


def exporting() -> bool:
    """Whether ``torch.export`` (which ``torch.onnx.export(..., dynamo=True)`` runs) is tracing the running code."""
    return torch.compiler.is_exporting()


def requested_backend(backend: str | None) -> str:
    """The backend asked for: ``backend`` itself, or ``$TALK_HF_BACKEND`` when it is ``None`` (as
    read when the running `reads_backend_once` forward started, if any); ``"torch"`` while
    `exporting`."""
    if exporting():
        return "torch"
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


@torch.compiler.assume_constant_result
def resolve_backend(backend: str | None, device: torch.device) -> str:
    """Map the user's choice to the backend that runs an op on tensors of ``device``.

    Under ``torch.compile`` this runs once, while tracing, and its answer is baked into the graph.

    Returns:
        ``"torch"``, ``"cpu"`` or ``"cuda"``; the compiled module of the last two is loaded.

    Raises:
        ValueError: a compiled backend asked for by name for tensors of another device.
    """
    requested = requested_backend(backend)
    if requested == "torch":
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
