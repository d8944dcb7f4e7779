"""talk_hf: TaLK convolutions and DynamicConv/LightConv for HuggingFace Transformers.

Importing the package registers its four model types with the Auto classes:

=================  ==========================  ====================================================
model_type         config                      AutoModel / AutoModelForSeq2SeqLM / ...ForCausalLM
=================  ==========================  ====================================================
``talk``           `TaLKConfig`                `TaLKModel` / `TaLKForConditionalGeneration`
``talk_lm``        `TaLKLMConfig`              `TaLKLMModel` / `TaLKForCausalLM`
``dynamic_conv``   `DynamicConvConfig`         `DynamicConvModel` / `DynamicConvForConditionalGeneration`
``dynamic_conv_lm``  `DynamicConvLMConfig`     `DynamicConvLMModel` / `DynamicConvForCausalLM`
=================  ==========================  ====================================================
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from . import ops
from .cache import ConvCache, ConvEncoderDecoderCache, ConvWindowLayer
from .hub import export_for_remote_code
from .models.dynamic_conv import (
    DynamicConvConfig,
    DynamicConvForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvLMConfig,
    DynamicConvLMModel,
    DynamicConvModel,
)
from .models.talk import (
    TaLKConfig,
    TaLKForCausalLM,
    TaLKForConditionalGeneration,
    TaLKLMConfig,
    TaLKLMModel,
    TaLKModel,
)
from .models.families import MODEL_FAMILIES
from .version import __version__

_HEAD_AUTO_CLASSES = {"AutoModelForSeq2SeqLM": AutoModelForSeq2SeqLM, "AutoModelForCausalLM": AutoModelForCausalLM}
for _config, _base, _head, _head_auto_class in MODEL_FAMILIES:
    AutoConfig.register(_config.model_type, _config, exist_ok=True)
    AutoModel.register(_config, _base, exist_ok=True)
    _HEAD_AUTO_CLASSES[_head_auto_class].register(_config, _head, exist_ok=True)

__all__ = [
    "ConvCache",
    "ConvEncoderDecoderCache",
    "ConvWindowLayer",
    "DynamicConvConfig",
    "DynamicConvForCausalLM",
    "DynamicConvForConditionalGeneration",
    "DynamicConvLMConfig",
    "DynamicConvLMModel",
    "DynamicConvModel",
    "MODEL_FAMILIES",
    "TaLKConfig",
    "TaLKForCausalLM",
    "TaLKForConditionalGeneration",
    "TaLKLMConfig",
    "TaLKLMModel",
    "TaLKModel",
    "export_for_remote_code",
    "ops",
    "__version__",
]
