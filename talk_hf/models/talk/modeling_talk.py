"""TaLK models (Lioutas & Guo, ICML 2020): the generic convolutional models with a TaLK core.

The core comes from the configuration's family (`family_talk.TALK`); these classes only give each
(configuration, head) pair the name that the Auto classes and remote code need.
"""

from __future__ import annotations

from ..conv_modeling import (
    ConvForCausalLM,
    ConvForConditionalGeneration,
    ConvLMModel,
    ConvPreTrainedModel,
    ConvSeq2SeqModel,
)
from .configuration_talk import TaLKConfig, TaLKLMConfig


class TaLKPreTrainedModel(ConvPreTrainedModel):
    config_class = TaLKConfig


class TaLKModel(TaLKPreTrainedModel, ConvSeq2SeqModel):
    """TaLK encoder-decoder without a head."""


class TaLKForConditionalGeneration(TaLKPreTrainedModel, ConvForConditionalGeneration):
    """TaLK encoder-decoder with an LM head, for translation and summarisation."""

    base_model_class = TaLKModel


class TaLKLMPreTrainedModel(ConvPreTrainedModel):
    config_class = TaLKLMConfig


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
