"""Tiny configurations of every generative head, shared by the model tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import talk_hf
from talk_hf.transformers_internals import CACHE_NAME

from . import toy_family

VOCAB = 40
PAD, BOS, EOS = 1, 0, 2


def word_tokenizer(size: int = VOCAB) -> PreTrainedTokenizerFast:
    """A word-level tokenizer of ``size`` tokens: the special ids above, then the words w3, w4, ..."""
    vocab = {"<s>": BOS, "<pad>": PAD, "</s>": EOS, **{f"w{i}": i for i in range(3, size)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w3"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    specials = dict(bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="w3")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials)


SIZES = dict(
    vocab_size=VOCAB,
    d_model=16,
    decoder_layers=2,
    decoder_ffn_dim=32,
    decoder_conv_heads=2,
    dropout=0.0,
    init_std=0.5,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)
SEQ2SEQ_SIZES = dict(
    SIZES,
    encoder_layers=2,
    encoder_ffn_dim=32,
    encoder_conv_heads=2,
    decoder_attention_heads=2,
    decoder_start_token_id=EOS,
)
# SliceNet has no FFN or heads.  Separability -1 gives super-separable steps of 2 and 1 groups; 4
# timescales fit the 16 channels; num_beams=1 because the generic tests expect greedy defaults
# (SliceNet's own default is the paper's beam 4).
SLICENET_SIZES = dict(
    vocab_size=VOCAB,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    kernel_sizes=[3, 5, 3],
    dilations=[1, 2, 1],
    separability=-1,
    timing_num_timescales=4,
    dropout=0.0,
    num_beams=1,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    decoder_start_token_id=EOS,
)


@dataclass(frozen=True)
class Case:
    """One model under test: how to build its config and which head to instantiate."""

    name: str
    head: type
    base: type
    config_class: type
    config_kwargs: dict

    @property
    def is_seq2seq(self) -> bool:
        return self.config_class.is_encoder_decoder

    def config(self, **overrides):
        return self.config_class(**{**self.config_kwargs, **overrides})

    def model(self, **overrides):
        torch.manual_seed(0)
        return self.head(self.config(**overrides)).eval()


CASES = [
    Case(
        "talk-seq2seq",
        talk_hf.TaLKForConditionalGeneration,
        talk_hf.TaLKModel,
        talk_hf.TaLKConfig,
        dict(SEQ2SEQ_SIZES, encoder_max_offsets=[1, 3], decoder_max_offsets=[2, 3]),
    ),
    Case(
        "talk-lm",
        talk_hf.TaLKForCausalLM,
        talk_hf.TaLKLMModel,
        talk_hf.TaLKLMConfig,
        dict(SIZES, decoder_max_offsets=[2, 3]),
    ),
    Case(
        "dynamic-seq2seq",
        talk_hf.DynamicConvForConditionalGeneration,
        talk_hf.DynamicConvModel,
        talk_hf.DynamicConvConfig,
        dict(SEQ2SEQ_SIZES, encoder_kernel_sizes=[3, 4], decoder_kernel_sizes=[3, 4]),
    ),
    Case(
        "dynamic-lm",
        talk_hf.DynamicConvForCausalLM,
        talk_hf.DynamicConvLMModel,
        talk_hf.DynamicConvLMConfig,
        dict(SIZES, decoder_kernel_sizes=[3, 4]),
    ),
    Case(
        "light_conv-lm",
        talk_hf.DynamicConvForCausalLM,
        talk_hf.DynamicConvLMModel,
        talk_hf.DynamicConvLMConfig,
        dict(SIZES, decoder_kernel_sizes=[2, 5], conv_type="light_conv"),
    ),
    Case(
        "slicenet",
        talk_hf.SliceNetForConditionalGeneration,
        talk_hf.SliceNetModel,
        talk_hf.SliceNetConfig,
        SLICENET_SIZES,
    ),
    # A family defined outside the package (toy_family.py), to show that the generic tests hold for any family.
    Case(
        "toy-seq2seq",
        toy_family.ToyForConditionalGeneration,
        toy_family.ToyModel,
        toy_family.ToyConfig,
        dict(SEQ2SEQ_SIZES, encoder_kernel_widths=[3, 2], decoder_kernel_widths=[2, 3]),
    ),
    Case(
        "toy-lm",
        toy_family.ToyForCausalLM,
        toy_family.ToyLMModel,
        toy_family.ToyLMConfig,
        dict(SIZES, decoder_kernel_widths=[3, 4]),
    ),
]
CASE_IDS = [case.name for case in CASES]
# The one head the shared cases lack: LightConv as an encoder-decoder (for tests that cover every
# family in both forms).
LIGHT_CONV_SEQ2SEQ = Case(
    "light_conv-seq2seq",
    talk_hf.DynamicConvForConditionalGeneration,
    talk_hf.DynamicConvModel,
    talk_hf.DynamicConvConfig,
    dict(SEQ2SEQ_SIZES, encoder_kernel_sizes=[3, 4], decoder_kernel_sizes=[3, 4], conv_type="light_conv"),
)
ALL_CASES = [*CASES, LIGHT_CONV_SEQ2SEQ]
ALL_IDS = [*CASE_IDS, LIGHT_CONV_SEQ2SEQ.name]


def random_tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    """(B, T) ids avoiding the special tokens 0..2."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


def model_inputs(case: Case, batch: int = 2, source_length: int = 7, target_length: int = 6) -> dict:
    """Forward inputs for ``case``: source + decoder ids for seq2seq, ids for an LM."""
    if case.is_seq2seq:
        return dict(
            input_ids=random_tokens(batch, source_length), decoder_input_ids=random_tokens(batch, target_length, 2)
        )
    return dict(input_ids=random_tokens(batch, target_length))


def training_inputs(case: Case, batch: int = 2, device: str = "cpu") -> tuple[dict, torch.Tensor]:
    """(forward inputs, labels) of a training step: the decoder ids become the seq2seq labels
    (the model shifts them back in), an LM predicts its own ids."""
    inputs = {name: tensor.to(device) for name, tensor in model_inputs(case, batch).items()}
    return inputs, inputs.pop("decoder_input_ids", inputs["input_ids"])


def generation_prompt(case: Case, batch: int = 2) -> dict:
    """Prompt for generate(): a source sentence (seq2seq) or a few LM tokens."""
    return dict(input_ids=random_tokens(batch, 7 if case.is_seq2seq else 5, seed=3))


def returned_cache(outputs):
    """The generation cache a forward or ``generate`` returned, under the field name of the installed
    transformers (``cache`` from 5.24, ``past_key_values`` before)."""
    return getattr(outputs, CACHE_NAME)
