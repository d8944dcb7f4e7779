"""The precision the operators accumulate in."""

import torch


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other float type (fp16, bf16, fp32) accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32
