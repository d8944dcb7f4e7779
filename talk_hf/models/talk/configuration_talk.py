"""Configurations of the TaLK models: encoder-decoder (``talk``) and decoder-only LM (``talk_lm``)."""

from __future__ import annotations

from typing import ClassVar

from ..conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase
from ..mixer_family import MixerFamily
from .family_talk import TALK


class TaLKConfig(ConvSeq2SeqConfigBase):
    r"""Configuration of [`TaLKModel`] / [`TaLKForConditionalGeneration`] (Lioutas & Guo, 2020).

    All fields of [`ConvSeq2SeqConfigBase`] and [`ConvLMConfigBase`] (sizes, layers, heads, GLU,
    activation, pre/post norm, dropouts, embedding scale and sharing, token ids, `use_cache`), plus:

    Args:
        activation_function (`str`, *optional*, defaults to `"swish"`): FFN activation.
        encoder_max_offsets (`list[int]`, *optional*, defaults to 1, 3, 7, 15, 15, ... (one per encoder
            layer)): per encoder layer, the maximum reach of a token's window to the left and to the
            right (ints >= 0).
        decoder_max_offsets (`list[int]`, *optional*, defaults to 1, 3, 7, 15, 15, ... (one per decoder
            layer)): per decoder layer, the maximum left reach (the decoder is causal).
        offset_dropout (`float`, *optional*, defaults to 0.0): dropout on the predicted relative offsets.

    Presets: `TaLKConfig.from_preset(name, **overrides)` with name in `iwslt14-de-en`, `wmt-big`,
    `cnn-dm`, `cnn-dm-deep`, `small` (a CPU-sized model for tests and demos).
    """

    model_type = "talk"
    family: ClassVar[MixerFamily] = TALK

    activation_function: str = "swish"
    encoder_max_offsets: list[int] | None = None
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0


class TaLKLMConfig(ConvLMConfigBase):
    r"""Configuration of [`TaLKLMModel`] / [`TaLKForCausalLM`]: a pre-norm decoder-only TaLK LM.

    All fields of [`ConvLMConfigBase`], plus:

    Args:
        activation_function (`str`, *optional*, defaults to `"swish"`): FFN activation.
        decoder_normalize_before (`bool`, *optional*, defaults to `True`): pre-norm blocks.
        decoder_max_offsets (`list[int]`, *optional*, defaults to 1, 3, 7, 15, 15, ... (one per layer)):
            per layer, the maximum left reach of a token's causal window (ints >= 0).
        offset_dropout (`float`, *optional*, defaults to 0.0): dropout on the predicted relative offsets.

    Presets: `TaLKLMConfig.from_preset(name, **overrides)` with name in `wikitext-103` (8 heads as
    in the paper; the authors' code uses 16) and `small` (CPU-sized).
    """

    model_type = "talk_lm"
    family: ClassVar[MixerFamily] = TALK

    activation_function: str = "swish"
    decoder_normalize_before: bool = True
    decoder_max_offsets: list[int] | None = None
    offset_dropout: float = 0.0
