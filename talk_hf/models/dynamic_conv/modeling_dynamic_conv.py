"""DynamicConv / LightConv models (Wu et al., ICLR 2019): the generic convolutional models with a
DynamicConv or LightConv core (``config.conv_type``).

The core comes from the configuration's family (`family_dynamic_conv.DYNAMIC_CONV`); these classes
only give each (configuration, head) pair the name that the Auto classes and remote code need.
"""

from __future__ import annotations

from ..conv_modeling import (
    ConvForCausalLM,
    ConvForConditionalGeneration,
    ConvLMModel,
    ConvPreTrainedModel,
    ConvSeq2SeqModel,
)
from .configuration_dynamic_conv import DynamicConvConfig, DynamicConvLMConfig


class DynamicConvPreTrainedModel(ConvPreTrainedModel):
    config_class = DynamicConvConfig


class DynamicConvModel(DynamicConvPreTrainedModel, ConvSeq2SeqModel):
    """DynamicConv/LightConv encoder-decoder without a head."""


class DynamicConvForConditionalGeneration(DynamicConvPreTrainedModel, ConvForConditionalGeneration):
    """DynamicConv/LightConv encoder-decoder with an LM head, for translation and summarisation."""

    base_model_class = DynamicConvModel


class DynamicConvLMPreTrainedModel(ConvPreTrainedModel):
    config_class = DynamicConvLMConfig


class DynamicConvLMModel(DynamicConvLMPreTrainedModel, ConvLMModel):
    """Decoder-only DynamicConv/LightConv stack without a head."""


class DynamicConvForCausalLM(DynamicConvLMPreTrainedModel, ConvForCausalLM):
    """Decoder-only DynamicConv/LightConv language model."""

    base_model_class = DynamicConvLMModel


__all__ = [
    "DynamicConvForCausalLM",
    "DynamicConvForConditionalGeneration",
    "DynamicConvLMModel",
    "DynamicConvLMPreTrainedModel",
    "DynamicConvModel",
    "DynamicConvPreTrainedModel",
]
