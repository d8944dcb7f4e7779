"""The registry of the package's model types: (config, base model, generative head, Auto class of the head).

`register_family` adds a family's model types and registers them with the Auto classes; importing
this module registers the built-in ones (TaLK, DynamicConv/LightConv, SliceNet).
"""

from __future__ import annotations

from typing import NamedTuple

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from .conv_modeling import ConvHeadBase
from .dynamic_conv.modeling_dynamic_conv import DynamicConvForCausalLM, DynamicConvForConditionalGeneration
from .slicenet.modeling_slicenet import SliceNetForConditionalGeneration
from .talk.modeling_talk import TaLKForCausalLM, TaLKForConditionalGeneration

_HEAD_AUTO_CLASSES = {"AutoModelForSeq2SeqLM": AutoModelForSeq2SeqLM, "AutoModelForCausalLM": AutoModelForCausalLM}


class ModelType(NamedTuple):
    """One registered model type."""

    config_class: type
    base_class: type
    head_class: type[ConvHeadBase]
    head_auto_class: str  # "AutoModelForSeq2SeqLM" or "AutoModelForCausalLM"


MODEL_FAMILIES: list[ModelType] = []


def register_family(*heads: type[ConvHeadBase]) -> None:
    """Register the model types of ``heads`` (generative heads, each with its ``config_class`` and
    ``base_model_class``) with the Auto classes and `MODEL_FAMILIES`.

    A head of an encoder-decoder configuration is an ``AutoModelForSeq2SeqLM``, any other an
    ``AutoModelForCausalLM``.  A model type already registered (here or in transformers) raises.
    """
    for head in heads:
        config_class = head.config_class
        head_auto_class = "AutoModelForSeq2SeqLM" if config_class.is_encoder_decoder else "AutoModelForCausalLM"
        AutoConfig.register(config_class.model_type, config_class)
        AutoModel.register(config_class, head.base_model_class)
        _HEAD_AUTO_CLASSES[head_auto_class].register(config_class, head)
        MODEL_FAMILIES.append(ModelType(config_class, head.base_model_class, head, head_auto_class))


def family_of(model_type: str) -> ModelType:
    """The `MODEL_FAMILIES` entry of ``model_type``; ValueError for an unknown type."""
    for family in MODEL_FAMILIES:
        if family.config_class.model_type == model_type:
            return family
    known = [family.config_class.model_type for family in MODEL_FAMILIES]
    raise ValueError(f"model_type {model_type!r} is not a talk_hf model type; expected one of {known}")


register_family(
    TaLKForConditionalGeneration,
    TaLKForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvForCausalLM,
    SliceNetForConditionalGeneration,
)
