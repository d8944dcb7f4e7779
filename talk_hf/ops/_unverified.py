"""The switch for compiled CUDA kernels that no GPU has run yet.

A new or rewritten CUDA kernel is compiled in CI (``.ci/compile_cuda``) but stays off until a lent
GPU has run its ``gpu`` tests and compute-sanitizer on it (``benchmarks/gpu_suite.sh``).  Until then
an op runs it only when ``$TALK_HF_UNVERIFIED_CUDA`` names the op: a comma-separated list of op names from
:data:`UNVERIFIED_CUDA_OPS` (e.g. ``depthwise_conv,talk_conv``), or ``all``; unset or empty
names none.  What "off" means is the op's choice (the PyTorch path, or its verified kernel); the op
documents it.  The variable is read at each call (under ``torch.compile``: once, while tracing).
"""

from __future__ import annotations

import os

import torch

UNVERIFIED_CUDA_ENV = "TALK_HF_UNVERIFIED_CUDA"

# The ops with a CUDA kernel behind the switch; remove a name when a GPU has verified its kernel.
UNVERIFIED_CUDA_OPS = ("depthwise_conv", "talk_conv", "dynamic_conv", "light_conv")


@torch.compiler.assume_constant_result
def unverified_cuda_enabled(op: str) -> bool:
    """Whether ``$TALK_HF_UNVERIFIED_CUDA`` turns on ``op``'s unverified CUDA kernel.

    Raises:
        ValueError: ``op`` is not in :data:`UNVERIFIED_CUDA_OPS`, or the variable names something
            other than those ops and ``all`` (a misspelt name would otherwise silently keep the
            kernel off).
    """
    if op not in UNVERIFIED_CUDA_OPS:
        raise ValueError(f"op must be one of {UNVERIFIED_CUDA_OPS}, got {op!r}")
    names = {name.strip() for name in os.environ.get(UNVERIFIED_CUDA_ENV, "").split(",")} - {""}
    unknown = names - {"all", *UNVERIFIED_CUDA_OPS}
    if unknown:
        raise ValueError(
            f"${UNVERIFIED_CUDA_ENV} must be 'all' or a comma-separated list of {UNVERIFIED_CUDA_OPS}, "
            f"got unknown name(s) {sorted(unknown)}"
        )
    return "all" in names or op in names
