"""Configurations of the DynamicConv / LightConv models: encoder-decoder (``dynamic_conv``) and
decoder-only LM (``dynamic_conv_lm``). ``conv_type`` picks DynamicConv or LightConv."""

from __future__ import annotations

from typing import ClassVar

from ..conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase
from ..mixer_family import MixerFamily
from .family_dynamic_conv import DYNAMIC_CONV

CONV_TYPES = ("dynamic_conv", "light_conv")  # the names of their ops, talk_hf.ops.dynamic_conv / light_conv
# The values configurations saved before talk_hf named them after their ops (fairseq's spellings).
LEGACY_CONV_TYPES = {"dynamic": "dynamic_conv", "lightweight": "light_conv"}


def canonical_conv_type(conv_type: str) -> str:
    """``conv_type``'s canonical name: a legacy spelling (`LEGACY_CONV_TYPES`) maps to it."""
    return LEGACY_CONV_TYPES.get(conv_type, conv_type)


class _ConvTypeMixin:
    """The ``conv_type`` default and check, and the kernel predictor's size, that both DynamicConv
    configurations share."""

    def fill_defaults(self) -> None:
        super().fill_defaults()
        self.conv_type = canonical_conv_type(self.conv_type)

    def validate_fields(self) -> None:
        super().validate_fields()
        if self.conv_type not in CONV_TYPES:
            raise ValueError(f"conv_type must be one of {CONV_TYPES}, got {self.conv_type!r}")

    def weight_shapes(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Adds DynamicConv's kernel predictor, Linear(conv_dim -> heads * K), of each stack's widest layer."""
        shapes = super().weight_shapes()
        if self.conv_type == "dynamic_conv":
            for stack in self.stacks:
                kernel_field, heads_field = f"{stack}_kernel_sizes", f"{stack}_conv_heads"
                outputs = getattr(self, heads_field) * max(getattr(self, kernel_field))
                shapes[f"{stack} kernel predictor"] = (
                    ("conv_dim", self.conv_dim),
                    (f"{heads_field} * max({kernel_field})", outputs),
                )
        return shapes


class DynamicConvConfig(_ConvTypeMixin, ConvSeq2SeqConfigBase):
    r"""Configuration of [`DynamicConvModel`] / [`DynamicConvForConditionalGeneration`] (Wu et al., 2019).

    All fields of [`ConvSeq2SeqConfigBase`] and [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`, *optional*, defaults to `"dynamic_conv"`): `"dynamic_conv"` (a kernel predicted
            per token) or `"light_conv"` (LightConv: one learned kernel per head and layer). Saved
            configurations' `"dynamic"` and `"lightweight"` (fairseq's names) read as these.
        encoder_kernel_sizes (`list[int]`, *optional*, defaults to 3, 7, 15, 31, 31, ... (one per encoder
            layer)): per encoder layer, the kernel size K >= 1 (centred: K // 2 taps to the left).
        decoder_kernel_sizes (`list[int]`, *optional*, defaults to 3, 7, 15, 31, 31, ... (one per decoder
            layer)): per decoder layer, the causal kernel size.
        weight_dropout (`float`, *optional*, defaults to 0.0): DropConnect on the softmax-normalised
            kernels.

    Presets: `DynamicConvConfig.from_preset(name, **overrides)` with name in `iwslt14-de-en`,
    `wmt-big`, `cnn-dm`, `cnn-dm-deep`, `small` (CPU-sized).
    """

    model_type = "dynamic_conv"
    family: ClassVar[MixerFamily] = DYNAMIC_CONV

    conv_type: str = "dynamic_conv"
    encoder_kernel_sizes: list[int] | None = None
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0


class DynamicConvLMConfig(_ConvTypeMixin, ConvLMConfigBase):
    r"""Configuration of [`DynamicConvLMModel`] / [`DynamicConvForCausalLM`]: a pre-norm decoder-only LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`, *optional*, defaults to `"dynamic_conv"`): `"dynamic_conv"` or `"light_conv"`, as in
            [`DynamicConvConfig`].
        decoder_normalize_before (`bool`, *optional*, defaults to `True`): pre-norm blocks.
        decoder_kernel_sizes (`list[int]`, *optional*, defaults to 3, 7, 15, 31, 31, ... (one per layer)):
            per layer, the causal kernel size K >= 1.
        weight_dropout (`float`, *optional*, defaults to 0.0): DropConnect on the softmax-normalised
            kernels.

    Presets: `DynamicConvLMConfig.from_preset(name, **overrides)` with name in `wikitext-103` and `small`
    (CPU-sized).
    """

    model_type = "dynamic_conv_lm"
    family: ClassVar[MixerFamily] = DYNAMIC_CONV

    conv_type: str = "dynamic_conv"
    decoder_normalize_before: bool = True
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0
