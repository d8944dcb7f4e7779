"""talk_hf: TaLK convolutions, DynamicConv/LightConv and SliceNet for HuggingFace Transformers.

Importing the package registers its five model types with the Auto classes:

=================  ==========================  ====================================================
model_type         config                      AutoModel / AutoModelForSeq2SeqLM / ...ForCausalLM
=================  ==========================  ====================================================
``talk``           `TaLKConfig`                `TaLKModel` / `TaLKForConditionalGeneration`
``talk_lm``        `TaLKLMConfig`              `TaLKLMModel` / `TaLKForCausalLM`
``dynamic_conv``   `DynamicConvConfig`         `DynamicConvModel` / `DynamicConvForConditionalGeneration`
``dynamic_conv_lm``  `DynamicConvLMConfig`     `DynamicConvLMModel` / `DynamicConvForCausalLM`
``slicenet``       `SliceNetConfig`            `SliceNetModel` / `SliceNetForConditionalGeneration`
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
from .models.slicenet import SliceNetConfig, SliceNetForConditionalGeneration, SliceNetModel
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



def _register_auto_classes() -> None:
    """Map each model type to its config, base model and head (a clash with a built-in raises)."""
    head_auto_classes = {"AutoModelForSeq2SeqLM": AutoModelForSeq2SeqLM, "AutoModelForCausalLM": AutoModelForCausalLM}
    for config_class, base_class, head_class, head_auto_class in MODEL_FAMILIES:
        AutoConfig.register(config_class.model_type, config_class)
        AutoModel.register(config_class, base_class)
        head_auto_classes[head_auto_class].register(config_class, head_class)


_register_auto_classes()

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
    "SliceNetConfig",
    "SliceNetForConditionalGeneration",
    "SliceNetModel",
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
