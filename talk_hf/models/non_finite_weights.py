"""A warning when a loaded checkpoint holds NaN or infinite weights.

transformers loads such weights without a word; the model then answers every input with NaN logits
(or, with an inf in an unused row, only some inputs), far from the file that caused it.
"""

from __future__ import annotations

import os
import warnings

import torch


class NonFiniteWeightsWarning(UserWarning):
    """A checkpoint's weights hold NaN or infinite values."""


def _values_to_check(tensor: torch.Tensor) -> torch.Tensor | None:
    """The floating-point values of a ``state_dict`` entry to check, or None where there are none to check.

    A tensor subclass is a quantized layout (torchao's, as transformers' ``TorchAoConfig`` loads them), whose
    own operators may lack ``isfinite``: its values are those of its own ``dequantize()`` where its class defines
    one (torchao's ``Int8Tensor``, ``Float8Tensor``, ...; one weight at a time, so the check holds at most one
    float copy of one weight), else it is not checked (``Int4Tensor``, ...).
    """
    if tensor.device.type == "meta" or not tensor.is_floating_point():
        return None
    if type(tensor) is torch.Tensor:
        return tensor
    return tensor.dequantize() if type(tensor).dequantize is not torch.Tensor.dequantize else None


def warn_about_non_finite_weights(model: torch.nn.Module, source: str | os.PathLike | None) -> None:
    """Warn, naming ``source`` and each parameter or buffer with NaN/inf values (and how many), if any.

    Tensors on the meta device (not loaded) and integer tensors are skipped.  A quantized weight (a tensor
    subclass, as ``from_pretrained(..., quantization_config=TorchAoConfig(...))`` loads) is checked through its
    class's own ``dequantize()`` (torchao's ``Int8Tensor``, ``Float8Tensor``, ...), which holds a NaN or inf
    wherever the quantized weight does (its scales carry them, so the count named is the dequantized weight's:
    a NaN in the checkpoint spreads over its row's scale); one whose class has none (torchao's
    ``Int4Tensor``, ...) is skipped: nothing then goes wrong but the missing warning, and the model runs as it
    would without the check.

    Args:
        model: the model just loaded.
        source: the folder or Hub id the weights came from (None: a ``state_dict`` given to ``from_pretrained``).
    """
    counts = {}
    for name, tensor in model.state_dict().items():
        values = _values_to_check(tensor)
        if values is not None:
            non_finite = values.numel() - int(torch.isfinite(values).sum())
            if non_finite:
                counts[name] = f"{non_finite} of {values.numel()}"
    if counts:
        listed = ", ".join(f"{name} ({count})" for name, count in counts.items())
        origin = "the given state_dict" if source is None else os.fspath(source)
        warnings.warn(
            f"the weights loaded from {origin} hold NaN or infinite values in {listed}: the model's outputs "
            "will be NaN or inf; the checkpoint is damaged, or was saved after training diverged",
            NonFiniteWeightsWarning,
            stacklevel=3,
        )
