"""A toy model family, defined the way a new family is added: this file and one registration line.

Its mixer is a plain depthwise convolution: one learned filter per channel, of a fixed width per
layer (``encoder_kernel_widths`` / ``decoder_kernel_widths``), centred in the encoder and causal in
the decoder, with DropConnect on the filters (``kernel_dropout``).  Everything else (embeddings,
blocks, cross-attention, cache, generation, heads, Auto classes) is the generic models'.  The model
tests run on it (``helpers.CASES``: ``toy-seq2seq`` and ``toy-lm``); once this module is imported,
the training scripts take ``--model_type toy`` and the benchmarks list ``ToyForCausalLM`` and
``ToyForConditionalGeneration`` (``tests/examples/test_registered_family.py``).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

import talk_hf
from talk_hf.layers.dropout import dropout
from talk_hf.layers.initialization import InitializesItself
from talk_hf.models.conv_configuration import ConvLMConfigBase, ConvSeq2SeqConfigBase
from talk_hf.models.conv_modeling import ConvForCausalLM, ConvForConditionalGeneration, ConvLMModel, ConvSeq2SeqModel
from talk_hf.transformers_internals import init


class DepthwiseConvCore(InitializesItself):
    """(B, T, C) -> (B, T, C): each channel convolved with its own K-tap filter.

    Args:
        channels: C.
        kernel_width: K, the taps of every filter.
        causal: decoder form (the K - 1 taps before each token and the token itself).
        kernel_dropout: DropConnect on the filters in training.
    """

    def __init__(self, channels: int, kernel_width: int, causal: bool, kernel_dropout: float):
        super().__init__()
        self.left = kernel_width - 1 if causal else kernel_width // 2
        self.right = kernel_width - 1 - self.left
        self.kernel_dropout = kernel_dropout
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_width))

    @property
    def history_size(self) -> int:
        """Past mixer inputs a causal step needs: K - 1."""
        return self.left

    def init_weights(self) -> None:
        init.normal_(self.weight, mean=0.0, std=self.weight.shape[-1] ** -0.5)

    def forward(self, u: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """u: (B, T, C) zeroed mixer input; context: (B, K - 1 + T, C), the cached history then u, or None."""
        if context is None:
            context = nn.functional.pad(u, (0, 0, self.left, self.right))
        weight = dropout(self.weight, self.kernel_dropout, self.training)
        return nn.functional.conv1d(context.transpose(1, 2), weight, groups=weight.shape[0]).transpose(1, 2)


def make_toy_core(config, layer_idx: int, causal: bool) -> DepthwiseConvCore:
    _, kernel_width = config.mixer_shape(layer_idx, causal)
    return DepthwiseConvCore(config.conv_dim, kernel_width, causal, config.kernel_dropout)


TOY = talk_hf.MixerFamily(
    name="toy",  # the training scripts' --model_type
    make_core=make_toy_core,
    sizes_name="kernel_widths",
    size_minimum=1,
    size_schedule=(3, 7),
    dropout_field="kernel_dropout",
    size_counts_the_token=True,  # a causal filter of K taps reaches K - 1 tokens back
    # The scripts' default --preset: the configurations' defaults (256 wide, 3 layers a stack) fit a CPU.
    seq2seq_presets={"small": {}},
    lm_presets={"small": {}},
)


class ToyConfig(ConvSeq2SeqConfigBase):
    model_type = "toy_conv"
    family: ClassVar[talk_hf.MixerFamily] = TOY

    encoder_kernel_widths: list[int] | None = None
    decoder_kernel_widths: list[int] | None = None
    kernel_dropout: float = 0.0


class ToyLMConfig(ConvLMConfigBase):
    model_type = "toy_conv_lm"
    family: ClassVar[talk_hf.MixerFamily] = TOY

    decoder_normalize_before: bool = True
    decoder_kernel_widths: list[int] | None = None
    kernel_dropout: float = 0.0


class ToyModel(ConvSeq2SeqModel):
    config_class = ToyConfig


class ToyForConditionalGeneration(ConvForConditionalGeneration):
    config_class = ToyConfig
    base_model_class = ToyModel


class ToyLMModel(ConvLMModel):
    config_class = ToyLMConfig


class ToyForCausalLM(ConvForCausalLM):
    config_class = ToyLMConfig
    base_model_class = ToyLMModel


talk_hf.register_family(ToyForConditionalGeneration, ToyForCausalLM)
