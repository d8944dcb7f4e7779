"""Switches for the candidate CUDA kernels that no GPU has verified yet (csrc/cuda_variants.h).

A candidate is compiled into the CUDA extension beside the kernel it may replace and is off until
switched on: for a whole process by ``$TALK_HF_CUDA_VARIANTS`` (a comma-separated list of candidate
names, read when the CUDA extension loads), or around one measurement by `cuda_variants`.  The GPU
verification (benchmarks/gpu_suite.sh, stage ``variants``) runs the gpu tests and compute-sanitizer
with each candidate on and times it against the default in the same call; the faster kernel that
passes stays and the other is deleted, so between GPU runs there are no candidates.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from types import ModuleType

VARIANTS_ENV = "TALK_HF_CUDA_VARIANTS"


def requested_variants(text: str | None, candidates: Sequence[str]) -> list[str]:
    """The candidate names that ``$TALK_HF_CUDA_VARIANTS``'s value ``text`` lists (None or blank: none).

    Raises:
        ValueError: naming the variable, a name that is not among ``candidates`` and the candidates.
    """
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in candidates]
    if unknown:
        raise ValueError(
            f"${VARIANTS_ENV} names {unknown}, which are not candidate CUDA kernels of this build; "
            f"its candidates are {list(candidates) or 'none'} (csrc/cuda_variants.h)"
        )
    return names


def apply_environment(module: ModuleType) -> None:
    """Switch on, in the loaded CUDA extension ``module``, the candidates that ``$TALK_HF_CUDA_VARIANTS``
    names (ValueError for a name that is not one of its candidates)."""
    for name in requested_variants(os.environ.get(VARIANTS_ENV), module.cuda_variant_names()):
        module.set_cuda_variant(name, True)


@contextlib.contextmanager
def cuda_variants(module: ModuleType, names: Sequence[str]) -> Iterator[None]:
    """Within the block, exactly the candidates ``names`` are on in the CUDA extension ``module``; after
    it, those that ``$TALK_HF_CUDA_VARIANTS`` names (as `apply_environment` left them).  For timing a
    candidate against the default in one process: benchmarks/bench_ops.py ``--variants``."""
    candidates = module.cuda_variant_names()
    requested_variants(",".join(names), candidates)  # the same check and message as the variable's
    before = requested_variants(os.environ.get(VARIANTS_ENV), candidates)
    try:
        for candidate in candidates:
            module.set_cuda_variant(candidate, candidate in names)
        yield
    finally:
        for candidate in candidates:
            module.set_cuda_variant(candidate, candidate in before)
