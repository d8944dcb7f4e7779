"""talk_hf: TaLK convolutions, DynamicConv/LightConv and SliceNet for HuggingFace Transformers.

Importing the package registers its five model types with the Auto classes (a new family registers
its own with `register_family`, see ``talk_hf.models.mixer_family``):

=================  ==========================  ====================================================
model_type         config                      AutoModel / AutoModelForSeq2SeqLM / ...ForCausalLM
=================  ==========================  ====================================================
``talk``           `TaLKConfig`                `TaLKModel` / `TaLKForConditionalGeneration`
``talk_lm``        `TaLKLMConfig`              `TaLKLMModel` / `TaLKForCausalLM`
``dynamic_conv``   `DynamicConvConfig`         `DynamicConvModel` / `DynamicConvForConditionalGeneration`
``dynamic_conv_lm``  `DynamicConvLMConfig`     `DynamicConvLMModel` / `DynamicConvForCausalLM`
``slicenet``       `SliceNetConfig`            `SliceNetModel` / `SliceNetForConditionalGeneration`
=================  ==========================  ====================================================

An exported model (``python -m talk_hf.export``) loads as a transformers model that ONNX Runtime runs:
``talk_hf.onnx.ORTModelForCausalLM`` / ``ORTModelForSeq2SeqLM``, also reachable as
``talk_hf.ORTModelForCausalLM`` / ``talk_hf.ORTModelForSeq2SeqLM`` (imported on first use: ONNX
Runtime is an optional extra).
"""

# isort: off
from . import quiet_imports  # first: imports transformers without torchao's import-time log lines

# isort: on
from . import ops
from .cache import ConvCache, ConvEncoderDecoderCache, ConvHistoryLayer
from .hub import export_for_remote_code
from .models.dynamic_conv import (
    DynamicConvConfig,
    DynamicConvForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvLMConfig,
    DynamicConvLMModel,
    DynamicConvModel,
)
from .models.families import MODEL_FAMILIES, register_family
from .models.mixer_family import MixerFamily
from .models.slicenet import SliceNetConfig, SliceNetForConditionalGeneration, SliceNetModel
from .models.talk import (
    TaLKConfig,
    TaLKForCausalLM,
    TaLKForConditionalGeneration,
    TaLKLMConfig,
    TaLKLMModel,
    TaLKModel,
)
from .quantization import quantize_int8
from .version import __version__

__all__ = [
    "ConvCache",
    "ConvEncoderDecoderCache",
    "ConvHistoryLayer",
    "DynamicConvConfig",
    "DynamicConvForCausalLM",
    "DynamicConvForConditionalGeneration",
    "DynamicConvLMConfig",
    "DynamicConvLMModel",
    "DynamicConvModel",
    "MODEL_FAMILIES",
    "MixerFamily",
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
    "register_family",
    "ops",
    "quantize_int8",
    "__version__",
]


_ONNX_RUNTIME_MODELS = ("ORTModelForCausalLM", "ORTModelForSeq2SeqLM")


def __getattr__(name: str):
    """``talk_hf.ORTModelForCausalLM`` / ``ORTModelForSeq2SeqLM``, imported from `talk_hf.onnx` on first use
    (it needs onnxruntime, an optional extra, which ``import talk_hf`` does not import)."""
    if name in _ONNX_RUNTIME_MODELS:
        from . import onnx

        return getattr(onnx, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
