"""The graphs to export: the encoder once per request, and one decoding step with its state in and out.

`EncoderForExport` maps a source to its encoder output and every decoder layer's cross-attention
keys and values (computed once, as the generation cache holds them).  `DecoderStepForExport` maps one
token per row, its position, whether it is a real token, each layer's fixed-size history and the
source's keys, values and mask, to the next-token logits and the histories moved on by one row.

Both re-state the data flow of the model's blocks (`MixerBlock`, `CrossAttentionBlock`,
`FeedForwardBlock`, `_ConvStack.embed`) over the model's own parameters and norms, instead of calling
the blocks' ``forward``: those call the compiled ops and ``talk_hf.ops.linear`` (custom ops that ONNX
cannot hold), check their inputs on the host, and update the generation cache in place, where a
graph must return its new state.  The cores run as `mixer_math`'s window sums; the products as
``F.linear``; cross-attention as its plain softmax form.  The tests hold these graphs to the model's
own ``generate`` token for token.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers.mixer_block import token_multiplier
from ..layers.sinusoidal_positions import positions_from_mask
from ..models.conv_modeling import ConvDecoder, ConvEncoder, ConvForCausalLM, ConvForConditionalGeneration
from .mixer_math import check_supported_core, sequence_core, step_core


def _linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


def _embed(stack, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(B, T) ids and positions -> (B, T, d) scaled embeddings + sinusoidal positions (`_ConvStack.embed`)."""
    tokens = stack.embed_tokens(input_ids)
    return tokens * stack.embed_scale + stack.embed_positions(positions + stack.position_offset).to(tokens.dtype)


def _mixer_input(block, hidden: torch.Tensor, real_tokens: torch.Tensor) -> torch.Tensor:
    """`MixerBlock.forward` up to the core: (B, T, d) block input -> (B, T, C) zeroed mixer input u."""
    u = _linear(block.in_proj, block.residual.pre(hidden))
    if block.use_glu:
        u = F.glu(u, dim=-1)
    return u * real_tokens


def _mixer_output(block, core_output: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """`MixerBlock.forward` after the core: (B, T, C) core output, (B, T, d) block input -> (B, T, d)."""
    return block.residual.post(_linear(block.out_proj, core_output), hidden)


def _feed_forward(block, hidden: torch.Tensor) -> torch.Tensor:
    """`FeedForwardBlock.forward`: (B, T, d) -> (B, T, d)."""
    x = block.activation(_linear(block.fc1, block.residual.pre(hidden)))
    return block.residual.post(_linear(block.fc2, x), hidden)


def _split_heads(block, x: torch.Tensor) -> torch.Tensor:
    """(B, L, d) -> (B, heads, L, head_dim)."""
    return x.view(x.shape[0], x.shape[1], block.heads, block.head_dim).transpose(1, 2)


def _cross_attention(block, hidden: torch.Tensor, keys, values, source_bias: torch.Tensor) -> torch.Tensor:
    """`CrossAttentionBlock.forward` over precomputed keys/values (B_s, heads, S, head_dim) and an
    additive (B_s, 1, 1, S) padding bias; (B, T, d) -> (B, T, d), the B = B_s x beams rows in groups
    of ``beams`` consecutive rows per source row (each group's queries one product with its source's keys)."""
    grouped = hidden.reshape(keys.shape[0], -1, hidden.shape[-1])  # (B_s, beams * T, d)
    queries = _split_heads(block, _linear(block.q_proj, block.residual.pre(grouped)))
    scores = queries @ keys.transpose(-1, -2) / math.sqrt(block.head_dim) + source_bias
    attended = torch.softmax(scores, dim=-1) @ values
    attended = attended.transpose(1, 2).reshape(hidden.shape)
    return block.residual.post(_linear(block.out_proj, attended), hidden)


def _cross_attention_names(layers: int) -> dict[str, int]:
    """Each decoder layer's cross-attention keys and values (B, heads, S, head_dim): name -> source axis."""
    return {f"cross_{kind}_{i}": 2 for i in range(layers) for kind in ("key", "value")}


def check_mixer_model(model) -> None:
    """Raise a ValueError naming what `EncoderForExport` / `DecoderStepForExport` do not support in
    ``model`` (its head class or a layer's core): they take `ConvForConditionalGeneration` and
    `ConvForCausalLM` with TaLK, DynamicConv or LightConv cores."""
    if not isinstance(model, (ConvForConditionalGeneration, ConvForCausalLM)):
        raise ValueError(
            f"the ONNX export supports the heads of the convolutional families (ConvForConditionalGeneration, "
            f"ConvForCausalLM: TaLK, DynamicConv, LightConv; SliceNetForConditionalGeneration), "
            f"not {type(model).__name__}"
        )
    stacks = {"encoder": model.model.encoder} if isinstance(model, ConvForConditionalGeneration) else {}
    stacks["decoder"] = model.model.decoder
    for name, stack in stacks.items():
        expected = ConvEncoder if name == "encoder" else ConvDecoder
        if not isinstance(stack, expected):
            raise ValueError(
                f"the ONNX export does not support {type(model).__name__}: its {name} is a {type(stack).__name__}, "
                f"not a {expected.__name__} of TaLK, DynamicConv or LightConv layers"
            )
        for index, layer in enumerate(stack.layers):
            check_supported_core(layer.mixer.core, f"{name} layer {index}")


class EncoderForExport(nn.Module):
    """input_ids (B, S), attention_mask (B, S) (1 at real tokens) -> encoder output (B, S, d), then each
    decoder layer's cross-attention keys and values (B, heads, S, head_dim), layer by layer.

    ``outputs``: each output's name and the axis of its source length."""

    def __init__(self, model: ConvForConditionalGeneration):
        super().__init__()
        check_mixer_model(model)
        self.encoder = model.model.encoder
        self.cross_attention = nn.ModuleList(layer.cross_attention for layer in model.model.decoder.layers)
        self.outputs = {"encoder_hidden_states": 1, **_cross_attention_names(len(self.cross_attention))}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        length = input_ids.shape[1]
        hidden = _embed(self.encoder, input_ids, positions_from_mask(attention_mask, length, 0, input_ids.device))
        real_tokens = token_multiplier(attention_mask, length, hidden.dtype)
        for layer in self.encoder.layers:
            u = _mixer_input(layer.mixer, hidden, real_tokens)
            hidden = _feed_forward(layer.ffn, _mixer_output(layer.mixer, sequence_core(layer.mixer.core, u), hidden))
        hidden = self.encoder.finish(hidden)
        keys_values = []
        for block in self.cross_attention:
            keys_values += [
                _split_heads(block, _linear(block.k_proj, hidden)),
                _split_heads(block, _linear(block.v_proj, hidden)),
            ]
        return (hidden, *keys_values)


class DecoderStepForExport(nn.Module):
    """One decoding step of a head, every input and output a tensor.

    Inputs, flat and in this order:
        input_ids (B, 1) long; positions (B, 1) long, the token's position (0 for the first real
        token; the model adds its ``position_offset``); token_mask (B, 1) long, 0 where the token is
        padding (a left-padded prompt), else 1; then one history (B, history_size_l, C) per decoder
        layer; encoder-decoders then take each layer's cross-attention keys and values (B_s, heads, S,
        head_dim) and the source's attention_mask (B_s, S), once per source row: the B = B_s x beams
        rows come in groups of ``beams`` consecutive rows per source row (beam search's beams).

    Outputs: logits (B, V) float32 of the next token, then each layer's new history (the old one
    without its oldest row, then this token's mixer input): the shapes of the inputs.

    ``state_shapes``: (history_size, channels) of each layer's history; ``source_inputs``: the names
    of the inputs after the histories, with the axis of their source length.
    """

    def __init__(self, model: ConvForConditionalGeneration | ConvForCausalLM):
        super().__init__()
        check_mixer_model(model)
        self.decoder = model.model.decoder
        self.lm_head = model.lm_head
        self.is_encoder_decoder = isinstance(model, ConvForConditionalGeneration)
        self.state_shapes = [(size, model.config.conv_dim) for size in self.decoder.history_sizes()]
        self.source_inputs = (
            {**_cross_attention_names(len(self.decoder.layers)), "encoder_attention_mask": 1}
            if self.is_encoder_decoder
            else {}
        )

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, token_mask: torch.Tensor, *rest: torch.Tensor):
        layers = self.decoder.layers
        histories, source = rest[: len(layers)], rest[len(layers) :]
        hidden = _embed(self.decoder, input_ids, positions)
        real_tokens = token_multiplier(token_mask, 1, hidden.dtype)
        if self.is_encoder_decoder:
            source_bias = torch.where(source[-1][:, None, None, :].bool(), 0.0, torch.finfo(hidden.dtype).min)
        new_histories = []
        for index, layer in enumerate(layers):
            u = _mixer_input(layer.mixer, hidden, real_tokens)
            context = torch.cat([histories[index], u], dim=1)
            new_histories.append(context[:, 1:])
            hidden = _mixer_output(layer.mixer, step_core(layer.mixer.core, u, context), hidden)
            if self.is_encoder_decoder:
                keys, values = source[2 * index], source[2 * index + 1]
                hidden = _cross_attention(layer.cross_attention, hidden, keys, values, source_bias)
            hidden = _feed_forward(layer.ffn, hidden)
        # the token's row before the output layer: a select after it copies the (B, V) logits
        logits = _linear(self.lm_head, self.decoder.finish(hidden)[:, 0]).float()
        return (logits, *new_histories)
