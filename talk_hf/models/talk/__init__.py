"""TaLK models and configurations."""

from .configuration_talk import TaLKConfig, TaLKLMConfig
from .modeling_talk import (
    TaLKForCausalLM,
    TaLKForConditionalGeneration,
    TaLKLMModel,
    TaLKLMPreTrainedModel,
    TaLKModel,
    TaLKPreTrainedModel,
)
