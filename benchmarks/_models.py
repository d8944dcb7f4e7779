"""Our models and same-size Transformer baselines, built alike for the benchmarks.

Our models are the generative heads of every registered family whose configurations take these
shapes (those with a `talk_hf.MixerFamily`: TaLK, DynamicConv, and any family registered with
`talk_hf.register_family`; SliceNet, without FFN or heads, is not one).  Every model gets the same
width d, depth L, heads H, FFN size f and vocabulary V.  Our layers' reach grows like the papers'
schedules (3, 7, 15, 31, 31, ...), each family's per-layer sizes set to that reach
(`MixerFamily.size_of_reach`: DynamicConv's kernels have K - 1 = reach).  The baselines use SDPA and
transformers' own caches; their sizes map onto Marian's and GPT-2's fields as the example scripts'
baselines do (`examples/common/models.transformer_config`).  `seq2seq_model_variants` adds each
family's other model types (DynamicConv's LightConv: the same head with ``conv_type="light_conv"``),
and an encoder-decoder's encoder can be deeper than its decoder (`ModelShape.encoder_layers`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import talk_hf  # noqa: F401  (before transformers: its quiet import of transformers' model base runs first)

# isort: split
import torch
from transformers import GPT2LMHeadModel, MarianMTModel

from talk_hf.models.conv_configuration import doubling_schedule
from talk_hf.models.families import MODEL_FAMILIES, ModelType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))  # the example scripts' `common`
from common.models import transformer_config  # noqa: E402  (the baselines' sizes, as the scripts build them)

LM_BASELINE, SEQ2SEQ_BASELINE = "GPT2 (baseline)", "Marian (baseline)"


def _ours(encoder_decoder: bool) -> dict[str, ModelType]:
    """The registered heads that take a `ModelShape`, by class name: encoder-decoder or causal LM."""
    return {
        model_type.head_class.__name__: model_type
        for model_type in MODEL_FAMILIES
        if getattr(model_type.config_class, "family", None) is not None
        and (model_type.head_auto_class == "AutoModelForSeq2SeqLM") == encoder_decoder
    }


def causal_lm_models() -> tuple[str, ...]:
    """The causal LMs benchmarked: ours (registered now), then GPT-2."""
    return (*_ours(encoder_decoder=False), LM_BASELINE)


def seq2seq_models() -> tuple[str, ...]:
    """The encoder-decoders benchmarked: ours (registered now), then Marian."""
    return (*_ours(encoder_decoder=True), SEQ2SEQ_BASELINE)


def _variants(encoder_decoder: bool) -> dict[str, tuple[ModelType, dict]]:
    """Our heads of `_ours`, one per model type of their family (`MixerFamily.model_type_variants`,
    the training scripts' ``--model_type`` names): name -> (the head, the configuration fields of
    that model type).  A family's own model type goes by the head's class name, any other variant
    by the class name and the variant's, e.g. ``DynamicConvForConditionalGeneration (light_conv)``."""
    named = {}
    for head_name, model_type in _ours(encoder_decoder).items():
        family = model_type.config_class.family
        for variant, fields in family.model_type_variants().items():
            named[head_name if variant == family.name else f"{head_name} ({variant})"] = (model_type, dict(fields))
    return named


def seq2seq_model_variants() -> tuple[str, ...]:
    """The encoder-decoders of every model type the scripts train (`seq2seq_models`, plus each
    family's variants: DynamicConv's LightConv), then Marian."""
    return (*_variants(encoder_decoder=True), SEQ2SEQ_BASELINE)


@dataclass(frozen=True)
class ModelShape:
    """Width d, depth L (each stack; an encoder-decoder's encoder: ``encoder_layers`` when given),
    heads H, FFN size f and vocabulary V of every model."""

    d_model: int = 512
    layers: int = 6
    heads: int = 8
    ffn: int = 2048
    vocab: int = 8000
    encoder_layers: int | None = None  # None: as deep as the decoder (``layers``)

    @classmethod
    def from_args(cls, args) -> ModelShape:
        return cls(args.d_model, args.layers, args.heads, args.ffn, args.vocab, getattr(args, "encoder_layers", None))

    def depth(self, stack: str) -> int:
        """The layers of ``stack`` (``"encoder"`` or ``"decoder"``)."""
        return self.encoder_layers if stack == "encoder" and self.encoder_layers is not None else self.layers


def add_shape_options(parser, defaults: ModelShape = ModelShape()) -> None:
    """``--d-model --layers --heads --ffn --vocab`` with ``defaults``."""
    parser.add_argument("--d-model", type=int, default=defaults.d_model)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--heads", type=int, default=defaults.heads)
    parser.add_argument("--ffn", type=int, default=defaults.ffn)
    parser.add_argument("--vocab", type=int, default=defaults.vocab)


def baseline_of(name: str) -> str:
    """The Transformer that model ``name`` is compared with."""
    return SEQ2SEQ_BASELINE if name in seq2seq_model_variants() else LM_BASELINE


def build_ours(
    model_type: ModelType, shape: ModelShape, dropout: float | None = None, **config_fields
) -> torch.nn.Module:
    """The registered head ``model_type`` of ``shape``; ``dropout``: see `build_model`; ``config_fields``:
    further configuration fields, set last (e.g. a tokenizer's special token ids)."""
    config_class = model_type.config_class
    family = config_class.family
    fields = {
        "vocab_size": shape.vocab,
        "d_model": shape.d_model,
        **{f"{stack}_layers": shape.depth(stack) for stack in config_class.stacks},
        **{f"{stack}_ffn_dim": shape.ffn for stack in config_class.stacks},
        **{f"{stack}_conv_heads": shape.heads for stack in config_class.stacks},
        **{
            family.sizes_field(stack): [
                family.size_of_reach(reach) for reach in doubling_schedule(shape.depth(stack), 3, 31)
            ]
            for stack in config_class.stacks
        },
    }
    if model_type.head_auto_class == "AutoModelForSeq2SeqLM":
        fields["decoder_attention_heads"] = shape.heads
    if dropout is not None:
        dropout_fields = ("dropout", "attention_dropout", "activation_dropout", "input_dropout", family.dropout_field)
        fields.update(dict.fromkeys(dropout_fields, dropout))
    return model_type.head_class(config_class(**{**fields, **config_fields}))


def build_model(
    name: str, shape: ModelShape, max_positions: int, dropout: float | None = None, **config_fields
) -> torch.nn.Module:
    """Model ``name`` (one of `causal_lm_models()` or `seq2seq_model_variants()`) of ``shape``, in float32.

    max_positions: the longest sequence the baselines' position tables cover.
    dropout: every dropout probability of the model (residual, attention, activation, embedding,
        offsets or kernels), or None for each config's defaults.
    config_fields: further configuration fields, set last (e.g. a tokenizer's special token ids).
    """
    ours = {**_variants(encoder_decoder=False), **_variants(encoder_decoder=True)}
    if name in ours:
        model_type, variant_fields = ours[name]
        return build_ours(model_type, shape, dropout, **{**variant_fields, **config_fields})
    if name in (LM_BASELINE, SEQ2SEQ_BASELINE):
        encoder_decoder = name == SEQ2SEQ_BASELINE
        dropout_fields = (
            ("dropout", "attention_dropout", "activation_dropout")
            if encoder_decoder
            else ("resid_pdrop", "embd_pdrop", "attn_pdrop")
        )
        token_ids = (
            dict(pad_token_id=1, decoder_start_token_id=2) if encoder_decoder else dict(bos_token_id=0, eos_token_id=2)
        )
        fields = {
            "attn_implementation": "sdpa",
            **token_ids,
            **({} if dropout is None else dict.fromkeys(dropout_fields, dropout)),
            **config_fields,
        }
        config = transformer_config(
            encoder_decoder,
            vocab_size=shape.vocab,
            d_model=shape.d_model,
            heads=shape.heads,
            layers=shape.layers,
            ffn_dim=shape.ffn,
            max_positions=max_positions,
            **({"encoder_layers": shape.encoder_layers} if encoder_decoder else {}),
            **fields,
        )
        return (MarianMTModel if encoder_decoder else GPT2LMHeadModel)(config)
    raise ValueError(f"unknown model {name!r}; expected one of {causal_lm_models() + seq2seq_model_variants()}")
