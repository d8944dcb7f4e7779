"""Configurations of the TaLK models: encoder-decoder (``talk``) and decoder-only LM (``talk_lm``)."""

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

# TaLK's per-layer maximum offsets: the window reaches at most that many tokens to each side.
_MAX_OFFSET_CAP = 15


class TaLKConfig(ConvSeq2SeqConfigBase):
    r"""Configuration of [`TaLKModel`] / [`TaLKForConditionalGeneration`] (Lioutas & Guo, 2020).

    All fields of [`ConvSeq2SeqConfigBase`] and [`ConvLMConfigBase`] (sizes, layers, heads, GLU,
    activation, pre/post norm, dropouts, embedding scale and sharing, token ids, `use_cache`), plus:

    Args:
        encoder_max_offsets (`list[int]`, *optional*): per encoder layer, the maximum reach of a
            token's window to the left and to the right (ints >= 0). Defaults to 1, 3, 7, 15, 15, ...
        decoder_max_offsets (`list[int]`, *optional*): per decoder layer, the maximum left reach
            (the decoder is causal). Defaults like the encoder's.
        offset_dropout (`float`): dropout on the predicted relative offsets.

    Presets: `TaLKConfig.from_preset(name)` with name in `iwslt14-de-en`, `wmt-big`, `cnn-dm`,
    `cnn-dm-deep`, `small` (a CPU-sized model for tests and demos).
    """

    model_type = "talk"
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "iwslt14-de-en": dict(
            preset_shape(512, 1024, 4, False, decoder_layers=6, encoder_layers=7),
            encoder_max_offsets=[1, 3, 7, 15, 15, 15, 15], decoder_max_offsets=[1, 3, 7, 15, 15, 15],
            dropout=0.3, offset_dropout=0.1, share_encoder_decoder_embeddings=False,
        ),
        "wmt-big": dict(
            preset_shape(1024, 4096, 16, True, decoder_layers=6, encoder_layers=7),
            encoder_max_offsets=[3, 7, 15, 31, 31, 31, 31], decoder_max_offsets=[3, 7, 15, 31, 31, 31],
            dropout=0.3, offset_dropout=0.1,
        ),
        "cnn-dm": dict(
            preset_shape(512, 2048, 8, True, decoder_layers=6, encoder_layers=7),
            encoder_max_offsets=[3, 7, 15, 31, 31, 31, 31], decoder_max_offsets=[3, 7, 15, 31, 31, 31],
        ),
        "cnn-dm-deep": dict(
            preset_shape(512, 2048, 8, True, decoder_layers=10, encoder_layers=10),
            encoder_max_offsets=[3, 7, 15] + [31] * 7, decoder_max_offsets=[3, 7] + [31] * 8,
        ),
        "small": dict(
            preset_shape(256, 1024, 4, True, decoder_layers=3, encoder_layers=3),
            encoder_max_offsets=[1, 3, 7], decoder_max_offsets=[1, 3, 7],
        ),
    }

    activation_function: str = "swish"
    encoder_max_offsets: list[int] | None = None
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0

    def validate_fields(self) -> None:
        if self.encoder_max_offsets is None:
            self.encoder_max_offsets = doubling_schedule(self.encoder_layers, 1, _MAX_OFFSET_CAP)
        if self.decoder_max_offsets is None:
            self.decoder_max_offsets = doubling_schedule(self.decoder_layers, 1, _MAX_OFFSET_CAP)
        super().validate_fields()
        check_per_layer("encoder_max_offsets", self.encoder_max_offsets, "encoder_layers", self.encoder_layers, 0)
        check_per_layer("decoder_max_offsets", self.decoder_max_offsets, "decoder_layers", self.decoder_layers, 0)
        check_probability("offset_dropout", self.offset_dropout)


class TaLKLMConfig(ConvLMConfigBase):
    r"""Configuration of [`TaLKLMModel`] / [`TaLKForCausalLM`]: a pre-norm decoder-only TaLK LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        decoder_max_offsets (`list[int]`, *optional*): per layer, the maximum left reach of a
            token's causal window (ints >= 0). Defaults to 1, 3, 7, 15, 15, ...
        offset_dropout (`float`): dropout on the predicted relative offsets.

    Presets: `TaLKLMConfig.from_preset(name)` with name in `wikitext-103` (the authors' code: 16
    heads would also fit; the paper says 8) and `small`.
    """

    model_type = "talk_lm"
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "wikitext-103": dict(
            preset_shape(1024, 4096, 8, True, decoder_layers=17),
            decoder_max_offsets=[3, 5, 7, 15, 31] + [63] * 12, vocab_size=267744, dropout=0.3,
        ),
        "small": dict(preset_shape(256, 1024, 4, True, decoder_layers=3), decoder_max_offsets=[1, 3, 7]),
    }

    activation_function: str = "swish"
    decoder_normalize_before: bool = True
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0

    def validate_fields(self) -> None:
        if self.decoder_max_offsets is None:
            self.decoder_max_offsets = doubling_schedule(self.decoder_layers, 1, _MAX_OFFSET_CAP)
        super().validate_fields()
        check_per_layer("decoder_max_offsets", self.decoder_max_offsets, "decoder_layers", self.decoder_layers, 0)
        check_probability("offset_dropout", self.offset_dropout)
