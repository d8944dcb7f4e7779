"""Configurations of the TaLK models: encoder-decoder (``talk``) and decoder-only LM (``talk_lm``)."""

from __future__ import annotations

from typing import Any, ClassVar

from ..conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase, lm_presets, seq2seq_presets

# Default per-layer maximum offsets: 1, 3, 7, 15, 15, ...
_SCHEDULE = (1, 15)


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

    Presets: `TaLKConfig.from_preset(name, **overrides)` with name in `iwslt14-de-en`, `wmt-big`,
    `cnn-dm`, `cnn-dm-deep`, `small` (a CPU-sized model for tests and demos, without dropout: it is
    tuned for runs of minutes).
    """

    model_type = "talk"
    presets: ClassVar[dict[str, dict[str, Any]]] = seq2seq_presets(
        "max_offsets", "offset_dropout", ([1, 3, 7, 15, 15, 15, 15], [1, 3, 7, 15, 15, 15]), [1, 3, 7]
    )
    per_layer_fields: ClassVar[dict[str, str]] = {
        "encoder_max_offsets": "encoder_layers", "decoder_max_offsets": "decoder_layers"
    }
    per_layer_schedule: ClassVar[tuple[int, int]] = _SCHEDULE
    mixer_dropout_field: ClassVar[str] = "offset_dropout"

    activation_function: str = "swish"
    encoder_max_offsets: list[int] | None = None
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0


class TaLKLMConfig(ConvLMConfigBase):
    r"""Configuration of [`TaLKLMModel`] / [`TaLKForCausalLM`]: a pre-norm decoder-only TaLK LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        decoder_max_offsets (`list[int]`, *optional*): per layer, the maximum left reach of a
            token's causal window (ints >= 0). Defaults to 1, 3, 7, 15, 15, ...
        offset_dropout (`float`): dropout on the predicted relative offsets.

    Presets: `TaLKLMConfig.from_preset(name, **overrides)` with name in `wikitext-103` (8 heads as
    in the paper; the authors' code uses 16) and `small` (CPU-sized, without dropout).
    """

    model_type = "talk_lm"
    presets: ClassVar[dict[str, dict[str, Any]]] = lm_presets("max_offsets", [1, 3, 7])
    per_layer_fields: ClassVar[dict[str, str]] = {"decoder_max_offsets": "decoder_layers"}
    per_layer_schedule: ClassVar[tuple[int, int]] = _SCHEDULE
    mixer_dropout_field: ClassVar[str] = "offset_dropout"

    activation_function: str = "swish"
    decoder_normalize_before: bool = True
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0
