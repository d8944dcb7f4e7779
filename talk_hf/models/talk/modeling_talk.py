"""TaLK models (Lioutas & Guo, ICML 2020): the generic convolutional models with a TaLK core."""

from __future__ import annotations

from ...layers.talk_mixer import TaLKCore
from ..conv_modeling import (
    ConvForCausalLM,
    ConvForConditionalGeneration,
    ConvLMModel,
    ConvPreTrainedModel,
    ConvSeq2SeqModel,
)
from .configuration_talk import TaLKConfig, TaLKLMConfig


def make_talk_core(config, layer_idx: int, causal: bool) -> TaLKCore:
    """The TaLK core of encoder (``causal=False``) or decoder layer ``layer_idx``."""
    if causal:
        heads, max_offset = config.decoder_conv_heads, config.decoder_max_offsets[layer_idx]
    else:
        heads, max_offset = config.encoder_conv_heads, config.encoder_max_offsets[layer_idx]
    return TaLKCore(config.conv_dim, heads, max_offset, causal, config.offset_dropout)


class TaLKPreTrainedModel(ConvPreTrainedModel):
    config_class = TaLKConfig
    make_core = staticmethod(make_talk_core)


class TaLKModel(TaLKPreTrainedModel, ConvSeq2SeqModel):
    """TaLK encoder-decoder without a head."""


class TaLKForConditionalGeneration(TaLKPreTrainedModel, ConvForConditionalGeneration):
    """TaLK encoder-decoder with an LM head, for translation and summarisation."""

    base_model_class = TaLKModel


class TaLKLMPreTrainedModel(ConvPreTrainedModel):
    config_class = TaLKLMConfig
    make_core = staticmethod(make_talk_core)


class TaLKLMModel(TaLKLMPreTrainedModel, ConvLMModel):
    """Decoder-only TaLK stack without a head."""


class TaLKForCausalLM(TaLKLMPreTrainedModel, ConvForCausalLM):
    """Decoder-only TaLK language model."""

    base_model_class = TaLKLMModel


__all__ = [
    "TaLKForCausalLM",
    "TaLKForConditionalGeneration",
    "TaLKLMModel",
    "TaLKLMPreTrainedModel",
    "TaLKModel",
    "TaLKPreTrainedModel",
]
