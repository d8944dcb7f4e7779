"""DynamicConv / LightConv models (Wu et al., ICLR 2019): the generic convolutional models with a
DynamicConv or LightConv core (``config.conv_type``)."""

from __future__ import annotations

from torch import nn

from ...layers.dynamic_conv_mixer import DynamicConvCore, LightConvCore
from ..conv_modeling import (
    ConvForCausalLM,
    ConvForConditionalGeneration,
    ConvLMModel,
    ConvPreTrainedModel,
    ConvSeq2SeqModel,
)
from .configuration_dynamic_conv import DynamicConvConfig, DynamicConvLMConfig


def make_dynamic_conv_core(config, layer_idx: int, causal: bool) -> nn.Module:
    """The DynamicConv or LightConv core of encoder (``causal=False``) or decoder layer ``layer_idx``."""
    if causal:
        heads, kernel_size = config.decoder_conv_heads, config.decoder_kernel_sizes[layer_idx]
    else:
        heads, kernel_size = config.encoder_conv_heads, config.encoder_kernel_sizes[layer_idx]
    core_class = DynamicConvCore if config.conv_type == "dynamic" else LightConvCore
    return core_class(config.conv_dim, heads, kernel_size, causal, config.weight_dropout)


class DynamicConvPreTrainedModel(ConvPreTrainedModel):
    config_class = DynamicConvConfig
    make_core = staticmethod(make_dynamic_conv_core)


class DynamicConvModel(DynamicConvPreTrainedModel, ConvSeq2SeqModel):
    """DynamicConv/LightConv encoder-decoder without a head."""


class DynamicConvForConditionalGeneration(DynamicConvPreTrainedModel, ConvForConditionalGeneration):
    """DynamicConv/LightConv encoder-decoder with an LM head, for translation and summarisation."""

    base_model_class = DynamicConvModel


class DynamicConvLMPreTrainedModel(ConvPreTrainedModel):
    config_class = DynamicConvLMConfig
    make_core = staticmethod(make_dynamic_conv_core)


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
