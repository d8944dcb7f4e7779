"""Configurations of the DynamicConv / LightConv models: encoder-decoder (``dynamic_conv``) and
decoder-only LM (``dynamic_conv_lm``). ``conv_type`` picks DynamicConv or LightConv."""

from __future__ import annotations

from typing import Any, ClassVar

from ..conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase, lm_presets, seq2seq_presets

CONV_TYPES = ("dynamic", "lightweight")
# Default kernel sizes: 3, 7, 15, 31, 31, ...
_SCHEDULE = (3, 31)


class _ConvTypeMixin:
    """The ``conv_type`` check both DynamicConv configurations share."""

    def validate_fields(self) -> None:
        super().validate_fields()
        if self.conv_type not in CONV_TYPES:
            raise ValueError(f"conv_type must be one of {CONV_TYPES}, got {self.conv_type!r}")


class DynamicConvConfig(_ConvTypeMixin, ConvSeq2SeqConfigBase):
    r"""Configuration of [`DynamicConvModel`] / [`DynamicConvForConditionalGeneration`] (Wu et al., 2019).

    All fields of [`ConvSeq2SeqConfigBase`] and [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`): `"dynamic"` (a kernel predicted per token) or `"lightweight"`
            (LightConv: one learned kernel per head and layer).
        encoder_kernel_sizes (`list[int]`, *optional*): per encoder layer, the kernel size K >= 1
            (centred: K // 2 taps to the left). Defaults to 3, 7, 15, 31, 31, ...
        decoder_kernel_sizes (`list[int]`, *optional*): per decoder layer, the causal kernel size.
        weight_dropout (`float`): DropConnect on the softmax-normalised kernels.

    Presets: `DynamicConvConfig.from_preset(name, **overrides)` with name in `iwslt14-de-en`,
    `wmt-big`, `cnn-dm`, `cnn-dm-deep`, `small` (CPU-sized, without dropout).
    """

    model_type = "dynamic_conv"
    presets: ClassVar[dict[str, dict[str, Any]]] = seq2seq_presets(
        "kernel_sizes", "weight_dropout", ([3, 7, 15, 31, 31, 31, 31], [3, 7, 15, 31, 31, 31]), [3, 7, 15]
    )
    per_layer_fields: ClassVar[dict[str, str]] = {
        "encoder_kernel_sizes": "encoder_layers", "decoder_kernel_sizes": "decoder_layers"
    }
    per_layer_minimum: ClassVar[int] = 1
    per_layer_schedule: ClassVar[tuple[int, int]] = _SCHEDULE
    mixer_dropout_field: ClassVar[str] = "weight_dropout"

    conv_type: str = "dynamic"
    encoder_kernel_sizes: list[int] | None = None
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0


class DynamicConvLMConfig(_ConvTypeMixin, ConvLMConfigBase):
    r"""Configuration of [`DynamicConvLMModel`] / [`DynamicConvForCausalLM`]: a pre-norm decoder-only LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`): `"dynamic"` or `"lightweight"`.
        decoder_kernel_sizes (`list[int]`, *optional*): per layer, the causal kernel size K >= 1.
            Defaults to 3, 7, 15, 31, 31, ...
        weight_dropout (`float`): DropConnect on the softmax-normalised kernels.

    Presets: `DynamicConvLMConfig.from_preset(name, **overrides)` with name in `wikitext-103` and `small`
    (CPU-sized, without dropout).
    """

    model_type = "dynamic_conv_lm"
    presets: ClassVar[dict[str, dict[str, Any]]] = lm_presets("kernel_sizes", [3, 7, 15])
    per_layer_fields: ClassVar[dict[str, str]] = {"decoder_kernel_sizes": "decoder_layers"}
    per_layer_minimum: ClassVar[int] = 1
    per_layer_schedule: ClassVar[tuple[int, int]] = _SCHEDULE
    mixer_dropout_field: ClassVar[str] = "weight_dropout"

    conv_type: str = "dynamic"
    decoder_normalize_before: bool = True
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0
