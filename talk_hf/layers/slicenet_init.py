"""How SliceNet's convolutions are initialised: `ConvInit`, and TensorFlow's orthogonal initialiser in
its kernel orientation (tensor2tensor's), for grouped and depthwise ``conv1d`` weights."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ConvInit:
    """How `SliceConv` initialises its weights.

    Args:
        scheme: ``"orthogonal"`` (t2t; TensorFlow's kernel orientation) or ``"normal"``.
        gain: gain of the orthogonal initialisation.
        std: standard deviation under ``"normal"``.
    """

    scheme: str = "orthogonal"
    gain: float = 1.0
    std: float = 0.02


T2T_INIT = ConvInit()  # tensor2tensor's: orthogonal, gain 1


def tf_orthogonal_grouped(
    out_channels: int, in_per_group: int, kernel_size: int, groups: int, gain: float
) -> torch.Tensor:
    """A grouped ``conv1d`` weight (out_channels, in_per_group, kernel_size) initialised as
    TensorFlow's orthogonal initialiser does one kernel per group.

    TF flattens a kernel [k, 1, c_in, c_out] to the matrix (k * c_in, c_out) and makes that
    orthogonal; ``torch.nn.init.orthogonal_`` would flatten (c_out, c_in * k) instead.
    """
    out_per_group = out_channels // groups
    blocks = []
    for _ in range(groups):
        matrix = torch.nn.init.orthogonal_(torch.empty(kernel_size * in_per_group, out_per_group), gain)
        blocks.append(matrix.view(kernel_size, in_per_group, out_per_group).permute(2, 1, 0))
    return torch.cat(blocks)


def tf_orthogonal_depthwise(channels: int, kernel_size: int, parts: int, gain: float) -> torch.Tensor:
    """A depthwise ``conv1d`` weight (channels, 1, kernel_size) as TF initialises ``parts`` separate
    depthwise kernels [k, 1, channels / parts, 1]: each flattens to one column, a unit vector
    (times ``gain``) over its k * channels / parts entries."""
    per_part = channels // parts
    blocks = [
        torch.nn.init.orthogonal_(torch.empty(kernel_size * per_part, 1), gain).view(kernel_size, per_part).t()
        for _ in range(parts)
    ]
    return torch.cat(blocks).unsqueeze(1)
