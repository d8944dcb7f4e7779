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


def warn_about_non_finite_weights(model: torch.nn.Module, source: str | os.PathLike | None) -> None:
    """Warn, naming ``source`` and each parameter or buffer with NaN/inf values (and how many), if any.

    Args:
        model: the model just loaded (tensors on the meta device, not loaded, are skipped).
        source: the folder or Hub id the weights came from (None: a ``state_dict`` given to ``from_pretrained``).
    """
    counts = {}
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and tensor.device.type != "meta":
            non_finite = tensor.numel() - int(torch.isfinite(tensor).sum())
            if non_finite:
                counts[name] = f"{non_finite} of {tensor.numel()}"
    if counts:
        listed = ", ".join(f"{name} ({count})" for name, count in counts.items())
        origin = "the given state_dict" if source is None else os.fspath(source)
        warnings.warn(
            f"the weights loaded from {origin} hold NaN or infinite values in {listed}: the model's outputs "
            "will be NaN or inf; the checkpoint is damaged, or was saved after training diverged",
            NonFiniteWeightsWarning,
            stacklevel=3,
        )
