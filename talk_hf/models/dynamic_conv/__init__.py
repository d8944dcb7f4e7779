"""DynamicConv / LightConv models and configurations."""

from .configuration_dynamic_conv import DynamicConvConfig, DynamicConvLMConfig
from .modeling_dynamic_conv import (
    DynamicConvForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvLMModel,
    DynamicConvLMPreTrainedModel,
    DynamicConvModel,
    DynamicConvPreTrainedModel,
)
