"""SliceNet's graphs to export: the encoder once per request, and one decoding step with its state in and out.

The decoder's state is one history per causal `ConvStep`, in the order of their ``cache_index``
(`SliceNetDecoder.causal_steps`: the IO mixer's attention steps, its mixing step, then each layer's
module steps and attention steps): its last ``history_size = (k - 1) * dilation`` gated inputs
(``relu(x)`` times the token mask), (B, history_size, C_in), C_in = 2 d for the IO mixer's step, d
for the others.  A step convolves the history and the new input (`valid_conv`) and returns the
history moved on by one row, as the generation cache's ``extend`` does.

The attention has no projections: the encoder output is its keys and its values, the same for the IO
mixer and every layer.  The encoder graph computes once what every step would otherwise redo: the
keys transposed and scaled, ``source_keys`` (B, d, S) = output^T / sqrt(d), and the padding's
additive ``source_bias`` (B, 1, S).

Both graphs re-state the data flow of the model's blocks (`SliceNetEncoder`, `SliceNetDecoder`,
`SliceNetIOMixer`, `SliceNetDecoderLayer`, `SliceAttention`, `ConvModule`, `ConvStep`) over their own
parameters, norms, embeddings and timing signals, for the reasons `decoder_step` gives; the tests
hold them to the model's own ``generate`` token for token.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.mixer_block import token_multiplier
from ..layers.sinusoidal_positions import positions_from_mask
from ..layers.slicenet_attention import SliceAttention
from ..layers.slicenet_conv import ConvStep
from ..models.slicenet.modeling_slicenet import SliceNetForConditionalGeneration
from .slicenet_math import conv_module, valid_conv

# The source inputs of the step (and outputs of the encoder), with the axis of their source length.
SOURCE_INPUTS = {"encoder_hidden_states": 1, "source_keys": 2, "source_bias": 2}


def _attention(
    block: SliceAttention,
    x: torch.Tensor,
    timing: torch.Tensor,
    conv_step: Callable[[ConvStep, torch.Tensor], torch.Tensor],
    source: tuple[torch.Tensor, ...],
) -> torch.Tensor:
    """`SliceAttention.forward` for one token.

    Args:
        block: the attention block.
        x: (B, 1, d) its input; timing: (B, 1, d) the token's timing signal.
        conv_step: runs a causal `ConvStep` on (B, 1, C_in) with its history (`SliceNetStepForExport`).
        source: the encoder output (B_s, S, d), ``source_keys`` (B_s, d, S) and ``source_bias`` (B_s, 1,
            S); the B = B_s x beams rows in groups of ``beams`` consecutive rows per source row.

    Returns:
        (B, 1, d): LN(x + attended) (t2t) or attended (the paper).
    """
    values, keys, bias = source
    query = x + timing
    for step in block.query_steps:
        query = conv_step(step, query)
    query = query.reshape(keys.shape[0], -1, query.shape[-1])  # (B_s, beams, d): one product per source row
    attended = (torch.softmax(query @ keys + bias, dim=-1) @ values).reshape(x.shape)
    return attended if block.norm is None else block.norm(x + attended)


class SliceNetEncoderForExport(nn.Module):
    """input_ids (B, S), attention_mask (B, S) (1 at real tokens) -> the encoder output (B, S, d), zero at
    padding, ``source_keys`` (B, d, S) and ``source_bias`` (B, 1, S): 0 at real tokens, float32's
    lowest number at padding."""

    outputs = SOURCE_INPUTS  # each output's name and the axis of its source length

    def __init__(self, model: SliceNetForConditionalGeneration):
        super().__init__()
        self.encoder = model.model.encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoder, length = self.encoder, input_ids.shape[1]
        positions = positions_from_mask(attention_mask, length, 0, input_ids.device)
        hidden = encoder.embed_tokens(input_ids) * encoder.embed_scale
        hidden = hidden + encoder.timing(positions).to(hidden.dtype)
        real_tokens = token_multiplier(attention_mask, length, hidden.dtype)

        def conv_step(step: ConvStep, x: torch.Tensor) -> torch.Tensor:
            """`ConvStep.forward` of an encoder step ("SAME" padding): (B, S, C_in) -> (B, S, C_out)."""
            left = step.history_size // 2
            padded = F.pad(torch.relu(x) * real_tokens, (0, 0, left, step.history_size - left))
            return step.norm(valid_conv(step.conv, padded))

        for layer in encoder.layers:
            hidden = conv_module(layer.module, hidden, conv_step) * real_tokens
        keys = hidden.transpose(1, 2) * (1 / math.sqrt(hidden.shape[-1]))
        bias = torch.where(attention_mask[:, None, :].bool(), 0.0, torch.finfo(hidden.dtype).min)
        return hidden, keys, bias


class SliceNetStepForExport(nn.Module):
    """One decoding step of `SliceNetForConditionalGeneration`, every input and output a tensor.

    Inputs, flat and in this order:
        input_ids (B, 1) long; positions (B, 1) long, the token's position (0 for the first); token_mask
        (B, 1) long, 0 where the token is padding, else 1; then one history (B, history_size, C_in)
        per causal step (``state_shapes``); then the encoder's outputs (``source_inputs``), once per
        source row: the B = B_s x beams rows come in groups of ``beams`` consecutive rows per source row.

    Outputs: logits (B, V) float32 of the next token, then each history moved on by one row (the old
    one without its oldest row, then this token's gated input): the shapes of the inputs.
    """

    source_inputs = SOURCE_INPUTS  # the inputs after the histories, with the axis of their source length

    def __init__(self, model: SliceNetForConditionalGeneration):
        super().__init__()
        self.decoder = model.model.decoder
        self.lm_head = model.lm_head
        # (history_size, C_in) of each history, in cache_index order; C_in = (C_in / groups) * groups
        self.state_shapes = [
            (step.history_size, step.conv.spatial_weight.shape[1] * step.conv.spatial_groups)
            for step in self.decoder.causal_steps()
        ]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, token_mask: torch.Tensor, *rest: torch.Tensor):
        decoder, count = self.decoder, len(self.state_shapes)
        histories, source = rest[:count], rest[count:]
        new_histories = list(histories)
        embedded = decoder.embed_tokens(input_ids) * decoder.embed_scale
        timing = decoder.timing(positions).to(embedded.dtype)
        real_tokens = token_multiplier(token_mask, 1, embedded.dtype)

        def conv_step(step: ConvStep, x: torch.Tensor) -> torch.Tensor:
            """`ConvStep.forward` with the cache: (B, 1, C_in) -> (B, 1, C_out); its history moves on."""
            context = torch.cat([histories[step.cache_index], torch.relu(x) * real_tokens], dim=1)
            new_histories[step.cache_index] = context[:, 1:]
            return step.norm(valid_conv(step.conv, context))

        mixer = decoder.io_mixer
        attended = _attention(mixer.attention, embedded, timing, conv_step, source)
        hidden = conv_step(mixer.mix, torch.cat([attended, embedded], dim=-1))
        for layer in decoder.layers:
            module_out = conv_module(layer.module, hidden, conv_step)
            query_input = hidden if layer.query_from_input else module_out
            hidden = module_out + _attention(layer.attention, query_input, timing, conv_step, source)
        if decoder.final_norm is not None:
            hidden = decoder.final_norm(hidden)
        # the token's row before the output layer: a select after it copies the (B, V) logits
        logits = F.linear(hidden[:, 0], self.lm_head.weight, self.lm_head.bias).float()
        return (logits, *new_histories)
