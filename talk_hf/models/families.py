"""The package's model types: (config, base model, generative head, Auto class of the head)."""

from __future__ import annotations

from .dynamic_conv.configuration_dynamic_conv import DynamicConvConfig, DynamicConvLMConfig
from .dynamic_conv.modeling_dynamic_conv import (
    DynamicConvForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvLMModel,
    DynamicConvModel,
)
from .slicenet.configuration_slicenet import SliceNetConfig
from .slicenet.modeling_slicenet import SliceNetForConditionalGeneration, SliceNetModel
from .talk.configuration_talk import TaLKConfig, TaLKLMConfig
from .talk.modeling_talk import TaLKForCausalLM, TaLKForConditionalGeneration, TaLKLMModel, TaLKModel

MODEL_FAMILIES = (
    (TaLKConfig, TaLKModel, TaLKForConditionalGeneration, "AutoModelForSeq2SeqLM"),
    (TaLKLMConfig, TaLKLMModel, TaLKForCausalLM, "AutoModelForCausalLM"),
    (DynamicConvConfig, DynamicConvModel, DynamicConvForConditionalGeneration, "AutoModelForSeq2SeqLM"),
    (DynamicConvLMConfig, DynamicConvLMModel, DynamicConvForCausalLM, "AutoModelForCausalLM"),
    (SliceNetConfig, SliceNetModel, SliceNetForConditionalGeneration, "AutoModelForSeq2SeqLM"),
)


def family_of(model_type: str):
    """The ``MODEL_FAMILIES`` entry of ``model_type``; ValueError for an unknown type."""
    for family in MODEL_FAMILIES:
        if family[0].model_type == model_type:
            return family
    known = [family[0].model_type for family in MODEL_FAMILIES]
    raise ValueError(f"model_type {model_type!r} is not a talk_hf model type; expected one of {known}")
