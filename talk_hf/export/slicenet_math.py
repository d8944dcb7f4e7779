"""SliceNet's convolutions as operations ONNX holds: `valid_conv` (a `SliceConv`) and `conv_module`.

`SliceConv` runs the compiled depthwise kernels, ``conv1d`` and ``talk_hf.ops.linear`` (custom ops no
ONNX graph can hold, and host-side checks).  Here, with the model's own parameters:

* the depthwise k-tap convolution (separability s <= 0) is `tap_sum` with one head per channel;
* the regular or grouped one (s >= 1) puts each channel's k taps side by side (the order of
  `weight_matrix`) and multiplies them by its weight as one (grouped) matrix product;
* the 1x1 convolution after it is a (grouped) matrix product, with its bias for s > 1.

The products are MatMuls (or Gemms), so ``--int8`` quantizes every one of them; an ONNX ``Conv``
would become a ``ConvInteger``, which ONNX Runtime's CPU provider lacks for int8 weights.

An encoder step's whole sequence (padded on both sides: t2t's "SAME") and a decoder step's one new
position (its cached history, then its input) are both "valid" convolutions over an input already
padded, so one function serves both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..layers.slicenet_conv import ConvModule, ConvStep, SliceConv
from .mixer_math import tap_rows, tap_sum


def weight_matrix(weight: torch.Tensor, groups: int) -> torch.Tensor:
    """A ``conv1d`` weight (C_out, C_in / groups, k) as the matrix `grouped_product` applies to
    channel-major taps: (C_out, C_in * k) for one group, else (groups, C_out / groups, C_in / groups * k).

    `talk_hf.layers.slicenet_step.matrix_of`'s layout, by ``reshape``: the TorchScript exporter folds a
    reshaped (and transposed) parameter into one constant, where it keeps ``flatten`` as a node that
    hides the weight from ONNX Runtime's int8 quantizer.
    """
    out_channels = weight.shape[0]
    if groups == 1:
        return weight.reshape(out_channels, -1)
    return weight.reshape(groups, out_channels // groups, -1)


def grouped_product(x: torch.Tensor, matrix: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (B, T, C_in) through a `weight_matrix`, (C_out, C_in) or in groups (G, C_out / G, C_in / G):
    (B, T, C_out), group g of the output from group g of the input; ``bias`` (C_out,) for one group
    (SliceConv's grouped maps have none)."""
    if matrix.dim() == 2:
        return F.linear(x, matrix, bias)
    groups, _, group_in = matrix.shape
    per_group = x.view(x.shape[0], x.shape[1], groups, 1, group_in)
    return torch.matmul(per_group, matrix.transpose(1, 2)).flatten(-3)  # (B, T, G, 1, C_out / G) -> (B, T, C_out)


def valid_conv(conv: SliceConv, padded: torch.Tensor) -> torch.Tensor:
    """t2t's ``subseparable_conv`` at the T positions a padded input holds in full.

    Args:
        conv: the `SliceConv` (its parameters are read, its ``forward`` is not called).
        padded: (B, T + history_size, C_in) gated step inputs: output t reads rows t, t + dilation,
            ..., t + history_size.

    Returns:
        (B, T, C_out) float32.
    """
    dilation, taps = conv.dilation, conv.spatial_weight.shape[-1]
    if conv.separability <= 0:
        out = tap_sum(padded, conv.spatial_weight.squeeze(1)[None, None], dilation)  # kernel (1, 1, C_in, k)
    else:
        shifted = [tap_rows(padded, tap, taps, dilation) for tap in range(taps)]
        channel_major = torch.stack(shifted, dim=-1).flatten(2)  # (B, T, C_in * k), each channel's taps together
        out = grouped_product(channel_major, weight_matrix(conv.spatial_weight, conv.spatial_groups))
    if conv.pointwise_weight is None:
        return out
    return grouped_product(out, weight_matrix(conv.pointwise_weight, conv.pointwise_groups), conv.pointwise_bias)


def conv_module(
    module: ConvModule, x: torch.Tensor, conv_step: Callable[[ConvStep, torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """`ConvModule.forward` with each of its steps run by ``conv_step(step, input)``: (B, T, d) -> (B, T, d).

    With y = S2(S1(x)) and z = S_n(... S3(x + y)): x + y + z (t2t's residuals) or x + z (the paper's).
    """
    first, second, *rest = module.steps
    x_plus_y = x + conv_step(second, conv_step(first, x))
    z = x_plus_y
    for step in rest:
        z = conv_step(step, z)
    return x_plus_y + z if module.residual == "t2t" else x + z
