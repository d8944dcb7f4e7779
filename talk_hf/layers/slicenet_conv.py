"""SliceNet's convolutions: `SliceConv` (t2t's ``subseparable_conv``), `ConvStep` and `ConvModule`.

Layout (B, T, C) everywhere: the depthwise k-tap convolutions (s <= 0) run
:func:`talk_hf.ops.depthwise_conv` on it directly, the grouped ones transpose to (B, C, T) for
``conv1d``, the 1x1 ones are linear maps over the channels (:func:`talk_hf.ops.linear.linear`, in
groups :func:`talk_hf.ops.grouped_linear.grouped_linear`), and the weights keep ``conv1d``'s shapes.
A separability s selects the convolution type exactly as tensor2tensor does (paper Table 1, c
channels, k taps):

    s == 0   depthwise k-tap conv, then 1x1 conv                  k*c + c^2        ("Full")
    s == 1   regular k-tap conv                                   k*c^2            ("None")
    s  > 1   k-tap conv in s channel groups, then 1x1 with bias   k*c^2/s + c^2 + c  (sub-separable)
    s  < 0   depthwise k-tap conv, then 1x1 in |s| groups         k*c + c^2/|s|    (super-separable)

No k-tap convolution has a bias: a LayerNorm follows each one.
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops import depthwise_conv
from ..ops._precision import accumulation_dtype
from ..ops.depthwise_conv import gate_input
from ..transformers_internals import init, is_loaded_from_checkpoint
from .initialization import InitializesItself
from .slicenet_init import T2T_INIT, ConvInit, tf_orthogonal_depthwise, tf_orthogonal_grouped
from .slicenet_step import StepWeights, channel_major, channel_map, depthwise_taps, matrix_of

PADDINGS = ("valid", "causal", "centred")


class SliceConv(InitializesItself):
    """t2t's ``subseparable_conv``: (B, T + (k-1)*dilation, C_in) -> (B, T, C_out) with "VALID" padding,
    or (B, T, C_in) -> (B, T, C_out) zero-padded on the left ("causal") or on both sides ("centred",
    t2t's "SAME" for odd k).

    Args:
        in_channels / out_channels: C_in and C_out.
        kernel_size / dilation: taps k of the spatial convolution and their spacing.
        separability: the convolution type (module docstring).
        conv_init: how `init_weights` fills the weights.

    Parameters (``conv1d`` weights, (out, in / groups, taps)):
        spatial_weight: the k-tap convolution, depthwise (C_in, 1, k) for s <= 0, else
            (C_out, C_in / max(s, 1), k) in max(s, 1) groups.
        pointwise_weight: the 1x1 convolution after it, in |s| groups for s < 0; None for s == 1.
        pointwise_bias: (C_out,) for s > 1, else None.

    ``parts`` is the number of channel parts t2t convolves separately (TensorFlow kernels per weight).
    The parameters are allocated uninitialised: `init_weights` fills them (the model calls it).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int,
        separability: int,
        conv_init: ConvInit = T2T_INIT,
    ):
        super().__init__()
        self.conv_init = conv_init
        self.separability = separability
        self.dilation = dilation
        self.parts = max(abs(separability), 1)
        depthwise = separability <= 0
        self.spatial_groups = in_channels if depthwise else separability
        spatial_out = in_channels if depthwise else out_channels
        self.spatial_weight = nn.Parameter(torch.empty(spatial_out, in_channels // self.spatial_groups, kernel_size))
        self.pointwise_groups = self.parts if depthwise else 1
        pointwise = None if separability == 1 else torch.empty(out_channels, spatial_out // self.pointwise_groups, 1)
        self.pointwise_weight = None if pointwise is None else nn.Parameter(pointwise)
        self.pointwise_bias = nn.Parameter(torch.empty(out_channels)) if separability > 1 else None
        self.keeps_step_weights = False  # see keeping_step_weights (talk_hf.layers.slicenet_step)
        self.kept_step_weights: StepWeights | None = None

    @property
    def history_size(self) -> int:
        """Input positions before an output's own that it reads: (k - 1) * dilation."""
        return (self.spatial_weight.shape[-1] - 1) * self.dilation

    def forward(
        self,
        inputs: torch.Tensor,
        padding: str = "valid",
        *,
        relu_input: bool = False,
        input_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """
        Args:
            inputs: with ``padding="valid"``, (B, history_size + T, C_in): T positions preceded by
                their history (zeros or cached inputs); otherwise (B, T, C_in).
            padding: ``"valid"``, ``"causal"`` or ``"centred"`` (class docstring).
            relu_input / input_mask: convolve ``relu(inputs)`` / with the rows where the (B, T')
                bool mask is False zeroed (ConvStep's gate; :func:`talk_hf.ops.depthwise_conv`
                applies it inside its kernel, for s <= 0).

        Returns:
            (B, T, C_out).
        """
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
        if padding == "valid" and inputs.shape[1] == self.history_size + 1:
            return self._step(gate_input(inputs, relu_input, input_mask))
        if self.separability <= 0:
            out = self._depthwise(inputs, padding, relu_input, input_mask)
        else:
            out = self._grouped(gate_input(inputs, relu_input, input_mask), padding)
        return out if self.pointwise_weight is None else self._pointwise(out)

    def _depthwise(
        self, inputs: torch.Tensor, padding: str, relu_input: bool, input_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The depthwise k-tap convolution (s <= 0) of the gated inputs over a sequence, by the
        compiled kernels (on the CPU; see talk_hf.ops.depthwise_conv): (B, T', C_in) -> (B, T, C_in),
        T = T' - history_size for ``"valid"``, else T'."""
        # (C_in, k); the parameter stays float32 under autocast while the inputs are bf16/fp16, and
        # the op wants one dtype (as conv1d gets under autocast).
        weight = self.spatial_weight.squeeze(1).to(inputs.dtype)
        gate = dict(relu_input=relu_input, input_mask=input_mask)
        if padding == "valid":  # the causal outputs after the history are exactly the valid ones
            out = depthwise_conv(inputs, weight, dilation=self.dilation, padding="causal", **gate)
            return out[:, self.history_size :]
        return depthwise_conv(inputs, weight, dilation=self.dilation, padding=padding, **gate)

    def _grouped(self, inputs: torch.Tensor, padding: str) -> torch.Tensor:
        """The regular or grouped k-tap convolution (s >= 1) over a sequence, by ``conv1d``:
        (B, T', C_in) -> (B, T, C_out), T as in `_depthwise`."""
        left = {"valid": 0, "causal": self.history_size, "centred": self.history_size // 2}[padding]
        context = nn.functional.pad(inputs, (0, 0, left, 0 if padding == "valid" else self.history_size - left))
        out = nn.functional.conv1d(
            context.transpose(1, 2), self.spatial_weight, dilation=self.dilation, groups=self.spatial_groups
        )
        return out.transpose(1, 2)

    def _step(self, context: torch.Tensor) -> torch.Tensor:
        """A decoding step: the output at one position from its history_size + 1 gated inputs,
        (B, history_size + 1, C_in) -> (B, 1, C_out), in O(k C_in + C_in C_out) for s <= 0 (see
        talk_hf.layers.slicenet_step); the depthwise taps accumulate as `_depthwise` does (float32 for
        bf16/fp16)."""
        weights = self.step_weights(accumulation_dtype(context.dtype))
        taps = context if self.dilation == 1 else context[:, :: self.dilation]  # (B, k, C_in), oldest first
        if self.separability <= 0:
            out = depthwise_taps(taps, weights.spatial)
            out = out if out.dtype == context.dtype else out.to(context.dtype)
        else:
            out = channel_map(channel_major(taps), weights.spatial).unsqueeze(1)
        return out if weights.pointwise is None else channel_map(out, weights.pointwise, self.pointwise_bias)

    def step_weights(self, dtype: torch.dtype) -> StepWeights:
        """The weights in the layouts of a decoding step accumulating in ``dtype``: derived now, or
        within `keeping_step_weights` kept from the first step (never while torch.compile traces)."""
        if torch.compiler.is_compiling():
            return self._derive_step_weights(dtype)
        kept = self.kept_step_weights
        if kept is None or kept.dtype != dtype:
            kept = self._derive_step_weights(dtype)
            if self.keeps_step_weights:
                self.kept_step_weights = kept
        return kept

    def _derive_step_weights(self, dtype: torch.dtype) -> StepWeights:
        spatial = (
            self.spatial_weight.squeeze(1).t().to(dtype).contiguous()  # (k, C_in)
            if self.separability <= 0
            else matrix_of(self.spatial_weight, self.spatial_groups)
        )
        pointwise = None if self.pointwise_weight is None else matrix_of(self.pointwise_weight, self.pointwise_groups)
        return StepWeights(dtype, spatial, pointwise)

    def _pointwise(self, x: torch.Tensor) -> torch.Tensor:
        """The 1x1 convolution, as a (grouped) linear map: (B, T, C_spatial) -> (B, T, C_out)."""
        return channel_map(x, matrix_of(self.pointwise_weight, self.pointwise_groups), self.pointwise_bias)

    @torch.no_grad()
    def init_weights(self) -> None:
        """t2t's initialisation (``conv_init.scheme="orthogonal"``, TF orientation) or N(0, std); the
        1x1 bias is zero.  Weights loaded from a checkpoint are left alone."""
        scheme, gain, std = self.conv_init.scheme, self.conv_init.gain, self.conv_init.std
        if self.pointwise_bias is not None:
            init.zeros_(self.pointwise_bias)
        for weight, parts in ((self.spatial_weight, self.parts), (self.pointwise_weight, self.pointwise_groups)):
            if weight is None or is_loaded_from_checkpoint(weight):
                continue
            if scheme == "normal":
                init.normal_(weight, mean=0.0, std=std)
            elif weight is self.spatial_weight and self.separability <= 0:
                init.copy_(weight, tf_orthogonal_depthwise(weight.shape[0], weight.shape[-1], parts, gain))
            else:
                init.copy_(weight, tf_orthogonal_grouped(*weight.shape, parts, gain))


class ConvStep(nn.Module):
    """ReLU, zeroing of padded positions, `SliceConv`, LayerNorm: (B, T, C_in) -> (B, T, C_out).

    The paper's ConvStep_{d,s}(W, x) = LN(SepConv_{d,s}(W, ReLU(x))), with t2t's zeroing of padding
    after the ReLU; for a depthwise SliceConv (s <= 0) the ReLU and the zeroing run inside the
    convolution's kernel (:func:`talk_hf.ops.depthwise_conv`'s input gate).  An encoder step pads
    (k-1)*dilation/2 zeros on each side ("SAME", the convolution's ``"centred"``).  A causal
    (decoder) step sees (k-1)*dilation inputs to the left: zeros without a cache (``"causal"``);
    with a cache, the step's history in it (index ``cache_index``, set by the decoder), which it
    also updates.

    Args:
        in_channels / out_channels / kernel_size / dilation / separability: as `SliceConv`.
        causal: decoder step.
        eps: LayerNorm epsilon.
        conv_init: how the convolution is initialised.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int,
        separability: int,
        causal: bool,
        eps: float,
        conv_init: ConvInit = T2T_INIT,
    ):
        super().__init__()
        self.causal = causal
        self.conv = SliceConv(in_channels, out_channels, kernel_size, dilation, separability, conv_init)
        self.norm = nn.LayerNorm(out_channels, eps=eps)
        self.cache_index: int | None = None

    @property
    def history_size(self) -> int:
        """Past inputs a causal step needs: (k - 1) * dilation."""
        return self.conv.history_size

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """
        Args:
            x: (B, T, C_in) step input.
            padding_mask: (B, T) bool, True at real tokens, or None.
            cache: the decoder's `ConvCache`, or None (causal steps only).

        Returns:
            (B, T, C_out).
        """
        if cache is not None and self.causal:  # the cache keeps the gated inputs as the history
            gated = gate_input(x, True, padding_mask)
            history_and_inputs = cache.layers[self.cache_index].extend(gated)
            if history_and_inputs is None:  # nothing before x: zeros, as without a cache
                return self.norm(self.conv(gated, "causal"))
            return self.norm(self.conv(history_and_inputs, "valid"))
        out = self.conv(x, "causal" if self.causal else "centred", relu_input=True, input_mask=padding_mask)
        return self.norm(out)


class ConvModule(nn.Module):
    """A stack of ConvSteps with t2t's two residual sub-blocks: (B, T, d) -> (B, T, d).

    With y = S2(S1(x)) and z = S_n(... S3(x + y)), it returns x + y + z (``residual="t2t"``) or
    x + z (``residual="paper"``: skips from the module input to steps 2 and 4).

    Args:
        d_model: channels.
        kernel_sizes / dilations / separabilities: per step (at least 3 steps).
        causal: decoder module.
        residual: ``"t2t"`` or ``"paper"``.
        eps: LayerNorm epsilon.
        conv_init: how the steps' convolutions are initialised.
    """

    def __init__(
        self,
        d_model: int,
        kernel_sizes: list[int],
        dilations: list[int],
        separabilities: list[int],
        causal: bool,
        residual: str,
        eps: float,
        conv_init: ConvInit = T2T_INIT,
    ):
        super().__init__()
        self.residual = residual
        self.steps = nn.ModuleList(
            ConvStep(d_model, d_model, kernel, dilation, separability, causal, eps, conv_init)
            for kernel, dilation, separability in zip(kernel_sizes, dilations, separabilities, strict=True)
        )

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """x: (B, T, d); padding_mask: (B, T) bool or None; cache: `ConvCache` or None (decoder)."""
        first, second, *rest = self.steps
        x_plus_y = x + second(first(x, padding_mask, cache), padding_mask, cache)
        z = x_plus_y
        for step in rest:
            z = step(z, padding_mask, cache)
        return x_plus_y + z if self.residual == "t2t" else x + z
