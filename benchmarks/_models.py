"""Our models and same-size Transformer baselines, built alike for the benchmarks.

Every model gets the same width d, depth L, heads H, FFN size f and vocabulary V.  Our layers'
reach grows like the papers' schedules (3, 7, 15, 31, 31, ...); DynamicConv gets kernels of the
same reach (K - 1 = max offset).  The baselines use SDPA and transformers' own caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel, MarianConfig, MarianMTModel

import talk_hf

CAUSAL_LM_MODELS = ("TaLKForCausalLM", "DynamicConvForCausalLM", "GPT2 (baseline)")
SEQ2SEQ_MODELS = ("TaLKForConditionalGeneration", "DynamicConvForConditionalGeneration", "Marian (baseline)")


@dataclass(frozen=True)
class ModelShape:
    """Width d, depth L (each stack), heads H, FFN size f and vocabulary V of every model."""

    d_model: int = 512
    layers: int = 6
    heads: int = 8
    ffn: int = 2048
    vocab: int = 8000

    @classmethod
    def from_args(cls, args) -> ModelShape:
        return cls(args.d_model, args.layers, args.heads, args.ffn, args.vocab)


def add_shape_options(parser, defaults: ModelShape = ModelShape()) -> None:
    """``--d-model --layers --heads --ffn --vocab`` with ``defaults``."""
    parser.add_argument("--d-model", type=int, default=defaults.d_model)
    parser.add_argument("--layers", type=int, default=defaults.layers)
    parser.add_argument("--heads", type=int, default=defaults.heads)
    parser.add_argument("--ffn", type=int, default=defaults.ffn)
    parser.add_argument("--vocab", type=int, default=defaults.vocab)


def baseline_of(name: str) -> str:
    """The Transformer that model ``name`` is compared with."""
    return "Marian (baseline)" if name in SEQ2SEQ_MODELS else "GPT2 (baseline)"


def build_model(name: str, shape: ModelShape, max_positions: int, dropout: float | None = None) -> torch.nn.Module:
    """Model ``name`` (one of CAUSAL_LM_MODELS or SEQ2SEQ_MODELS) of ``shape``, in float32.

    max_positions: the longest sequence the baselines' position tables cover.
    dropout: every dropout probability of the model (residual, attention, activation, embedding,
        offsets or kernels), or None for each config's defaults.
    """
    offsets = talk_hf.models.conv_configuration.doubling_schedule(shape.layers, 3, 31)
    kernels = [size + 1 for size in offsets]  # the same reach: K - 1 = max offset
    lm = {
        "vocab_size": shape.vocab,
        "d_model": shape.d_model,
        "decoder_layers": shape.layers,
        "decoder_ffn_dim": shape.ffn,
        "decoder_conv_heads": shape.heads,
    }
    s2s = {
        **lm,
        "encoder_layers": shape.layers,
        "encoder_ffn_dim": shape.ffn,
        "encoder_conv_heads": shape.heads,
        "decoder_attention_heads": shape.heads,
    }
    ours = {  # name: (model class, config class, config fields)
        "TaLKForCausalLM": (talk_hf.TaLKForCausalLM, talk_hf.TaLKLMConfig, {**lm, "decoder_max_offsets": offsets}),
        "DynamicConvForCausalLM": (
            talk_hf.DynamicConvForCausalLM,
            talk_hf.DynamicConvLMConfig,
            {**lm, "decoder_kernel_sizes": kernels},
        ),
        "TaLKForConditionalGeneration": (
            talk_hf.TaLKForConditionalGeneration,
            talk_hf.TaLKConfig,
            {**s2s, "encoder_max_offsets": offsets, "decoder_max_offsets": offsets},
        ),
        "DynamicConvForConditionalGeneration": (
            talk_hf.DynamicConvForConditionalGeneration,
            talk_hf.DynamicConvConfig,
            {**s2s, "encoder_kernel_sizes": kernels, "decoder_kernel_sizes": kernels},
        ),
    }
    if name in ours:
        model_class, config_class, fields = ours[name]
        if dropout is not None:
            dropout_fields = (
                "dropout",
                "attention_dropout",
                "activation_dropout",
                "input_dropout",
                config_class.family.dropout_field,
            )
            fields = {**fields, **dict.fromkeys(dropout_fields, dropout)}
        return model_class(config_class(**fields))
    if name == "GPT2 (baseline)":
        gpt2_dropout = {} if dropout is None else dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), dropout)
        return GPT2LMHeadModel(
            GPT2Config(
                vocab_size=shape.vocab,
                n_embd=shape.d_model,
                n_layer=shape.layers,
                n_head=shape.heads,
                n_inner=shape.ffn,
                n_positions=max_positions,
                bos_token_id=0,
                eos_token_id=2,
                attn_implementation="sdpa",
                **gpt2_dropout,
            )
        )
    if name == "Marian (baseline)":
        marian_dropout = (
            {} if dropout is None else dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), dropout)
        )
        return MarianMTModel(
            MarianConfig(
                vocab_size=shape.vocab,
                d_model=shape.d_model,
                encoder_layers=shape.layers,
                decoder_layers=shape.layers,
                encoder_attention_heads=shape.heads,
                decoder_attention_heads=shape.heads,
                encoder_ffn_dim=shape.ffn,
                decoder_ffn_dim=shape.ffn,
                pad_token_id=1,
                decoder_start_token_id=2,
                max_position_embeddings=max_positions,
                attn_implementation="sdpa",
                **marian_dropout,
            )
        )
    raise ValueError(f"unknown model {name!r}; expected one of {CAUSAL_LM_MODELS + SEQ2SEQ_MODELS}")
