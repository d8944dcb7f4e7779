"""Configurations of the DynamicConv / LightConv models: encoder-decoder (``dynamic_conv``) and
decoder-only LM (``dynamic_conv_lm``). ``conv_type`` picks DynamicConv or LightConv."""

from __future__ import annotations

from typing import Any, ClassVar

from ..conv_configuration import (
    ConvLMConfigBase,
    ConvSeq2SeqConfigBase,
    check_per_layer,
    check_probability,
    doubling_schedule,
    preset_shape,
)

CONV_TYPES = ("dynamic", "lightweight")
# Kernel sizes grow 3, 7, 15, 31 and stop there (the papers' schedule).
_KERNEL_SIZE_CAP = 31


def _check_conv_type(conv_type: Any) -> None:
    if conv_type not in CONV_TYPES:
        raise ValueError(f"conv_type must be one of {CONV_TYPES}, got {conv_type!r}")


class DynamicConvConfig(ConvSeq2SeqConfigBase):
    r"""Configuration of [`DynamicConvModel`] / [`DynamicConvForConditionalGeneration`] (Wu et al., 2019).

    All fields of [`ConvSeq2SeqConfigBase`] and [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`): `"dynamic"` (a kernel predicted per token) or `"lightweight"`
            (LightConv: one learned kernel per head and layer).
        encoder_kernel_sizes (`list[int]`, *optional*): per encoder layer, the kernel size K >= 1
            (centred: K // 2 taps to the left). Defaults to 3, 7, 15, 31, 31, ...
        decoder_kernel_sizes (`list[int]`, *optional*): per decoder layer, the causal kernel size.
        weight_dropout (`float`): DropConnect on the softmax-normalised kernels.

    Presets: `DynamicConvConfig.from_preset(name)` with name in `iwslt14-de-en`, `wmt-big`,
    `cnn-dm`, `cnn-dm-deep`, `small`.
    """

    model_type = "dynamic_conv"
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "iwslt14-de-en": dict(
            preset_shape(512, 1024, 4, False, decoder_layers=6, encoder_layers=7),
            encoder_kernel_sizes=[3, 7, 15, 31, 31, 31, 31], decoder_kernel_sizes=[3, 7, 15, 31, 31, 31],
            dropout=0.3, weight_dropout=0.1, share_encoder_decoder_embeddings=False,
        ),
        "wmt-big": dict(
            preset_shape(1024, 4096, 16, True, decoder_layers=6, encoder_layers=7),
            encoder_kernel_sizes=[3, 7, 15, 31, 31, 31, 31], decoder_kernel_sizes=[3, 7, 15, 31, 31, 31],
            dropout=0.3, weight_dropout=0.1,
        ),
        "cnn-dm": dict(
            preset_shape(512, 2048, 8, True, decoder_layers=6, encoder_layers=7),
            encoder_kernel_sizes=[3, 7, 15, 31, 31, 31, 31], decoder_kernel_sizes=[3, 7, 15, 31, 31, 31],
        ),
        "cnn-dm-deep": dict(
            preset_shape(512, 2048, 8, True, decoder_layers=10, encoder_layers=10),
            encoder_kernel_sizes=[3, 7, 15] + [31] * 7, decoder_kernel_sizes=[3, 7] + [31] * 8,
        ),
        "small": dict(
            preset_shape(256, 1024, 4, True, decoder_layers=3, encoder_layers=3),
            encoder_kernel_sizes=[3, 7, 15], decoder_kernel_sizes=[3, 7, 15],
        ),
    }

    conv_type: str = "dynamic"
    encoder_kernel_sizes: list[int] | None = None
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0

    def validate_fields(self) -> None:
        if self.encoder_kernel_sizes is None:
            self.encoder_kernel_sizes = doubling_schedule(self.encoder_layers, 3, _KERNEL_SIZE_CAP)
        if self.decoder_kernel_sizes is None:
            self.decoder_kernel_sizes = doubling_schedule(self.decoder_layers, 3, _KERNEL_SIZE_CAP)
        super().validate_fields()
        _check_conv_type(self.conv_type)
        check_per_layer("encoder_kernel_sizes", self.encoder_kernel_sizes, "encoder_layers", self.encoder_layers, 1)
        check_per_layer("decoder_kernel_sizes", self.decoder_kernel_sizes, "decoder_layers", self.decoder_layers, 1)
        check_probability("weight_dropout", self.weight_dropout)


class DynamicConvLMConfig(ConvLMConfigBase):
    r"""Configuration of [`DynamicConvLMModel`] / [`DynamicConvForCausalLM`]: a pre-norm decoder-only LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        conv_type (`str`): `"dynamic"` or `"lightweight"`.
        decoder_kernel_sizes (`list[int]`, *optional*): per layer, the causal kernel size K >= 1.
            Defaults to 3, 7, 15, 31, 31, ...
        weight_dropout (`float`): DropConnect on the softmax-normalised kernels.

    Presets: `DynamicConvLMConfig.from_preset(name)` with name in `wikitext-103` and `small`.
    """

    model_type = "dynamic_conv_lm"
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "wikitext-103": dict(
            preset_shape(1024, 4096, 8, True, decoder_layers=17),
            decoder_kernel_sizes=[3, 5, 7, 15, 31] + [63] * 12, vocab_size=267744, dropout=0.3,
        ),
        "small": dict(preset_shape(256, 1024, 4, True, decoder_layers=3), decoder_kernel_sizes=[3, 7, 15]),
    }

    conv_type: str = "dynamic"
    decoder_normalize_before: bool = True
    decoder_kernel_sizes: list[int] | None = None
    weight_dropout: float = 0.0

    def validate_fields(self) -> None:
        if self.decoder_kernel_sizes is None:
            self.decoder_kernel_sizes = doubling_schedule(self.decoder_layers, 3, _KERNEL_SIZE_CAP)
        super().validate_fields()
        _check_conv_type(self.conv_type)
        check_per_layer("decoder_kernel_sizes", self.decoder_kernel_sizes, "decoder_layers", self.decoder_layers, 1)
        check_probability("weight_dropout", self.weight_dropout)
