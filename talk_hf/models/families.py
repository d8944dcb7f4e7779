"""The registry of the package's model types: (config, base model, generative head, Auto class of the head).

`register_family` adds a family's model types and registers them with the Auto classes; importing
this module registers the built-in ones (TaLK, DynamicConv/LightConv, SliceNet).  The training
scripts and the benchmarks read their models from here (`script_model_types`, `MODEL_FAMILIES`),
so a registered family needs no table of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

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


class ScriptModelType(NamedTuple):
    """One ``--model_type`` of the training scripts: a family's configurations and the fields it sets."""

    seq2seq_config: type | None  # the encoder-decoder configuration class (None: the family has none)
    lm_config: type | None  # the decoder-only one
    fields: Mapping[str, Any]  # configuration fields this model type sets (e.g. conv_type="light_conv")

    def config_class(self, encoder_decoder: bool) -> type | None:
        """The configuration class of the encoder-decoder (True) or decoder-only (False) form, or None."""
        return self.seq2seq_config if encoder_decoder else self.lm_config


def script_model_types() -> dict[str, ScriptModelType]:
    """The training scripts' ``--model_type`` names of the registered model types, in registration order.

    A configuration with a `MixerFamily` goes by the family's ``name`` (or by each name of its
    ``variants``), one without (SliceNet's) by its ``model_type``; an encoder-decoder and a
    decoder-only configuration of one name are the two forms of that model type.
    """
    named: dict[str, ScriptModelType] = {}
    for model_type in MODEL_FAMILIES:
        config_class = model_type.config_class
        family = getattr(config_class, "family", None)
        variants = family.model_type_variants() if family is not None else {config_class.model_type: {}}
        form = "seq2seq_config" if config_class.is_encoder_decoder else "lm_config"
        for name, fields in variants.items():
            known = named.get(name, ScriptModelType(None, None, fields))
            if getattr(known, form) is not None:
                raise ValueError(f"{getattr(known, form).__name__} and {config_class.__name__} are both named {name!r}")
            named[name] = known._replace(**{form: config_class})
    return named


register_family(
    TaLKForConditionalGeneration,
    TaLKForCausalLM,
    DynamicConvForConditionalGeneration,
    DynamicConvForCausalLM,
    SliceNetForConditionalGeneration,
)
