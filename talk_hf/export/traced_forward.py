"""The graphs an export traces: the model's own forward, with the generation state as tensors in and out.

No block or core is written here.  `EncoderGraph` calls the model's encoder and each decoder layer's
cross-attention projection of its output (what the generation cache computes once per source);
`DecodingStepGraph` rebuilds the model's own generation cache from its inputs
(`ConvCache.from_state`, `ConvEncoderDecoderCache.from_state`), calls the head's ``forward`` over one
new token per row, as ``generate`` does, and returns the next-token logits and the cache's windows
after the forward updated them; `PromptGraph` calls a causal LM's ``forward`` over a whole prompt
with a new cache, as ``generate``'s first call does.  Traced while exporting, every op takes its
PyTorch path and the ops' host-side value checks step aside (`talk_hf.ops._backend.exporting`), so
the graphs hold the cores' own sequence and step forms and ``talk_hf.ops.linear`` as ``F.linear``.

`graph_layout` finds, by running the model once, what a step reads of the source: the cross-attention
keys and values its cache holds after a first token (the convolutional families), or, when the cache
holds none, the encoder output itself (SliceNet, whose attention has no projections).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..transformers_internals import split_cache

ENCODER_OUTPUT, SOURCE_MASK = "encoder_hidden_states", "encoder_attention_mask"


@dataclass(frozen=True)
class GraphLayout:
    """What the graphs of one model take and give.

    state_shapes: (history_size, channels) of each window of the model's cache, in cache order.
    cross_layers: the decoder layers whose cross-attention keys and values the cache holds (the
        encoder graph computes them; the step takes them as ``cross_key_i`` / ``cross_value_i``).
    source_inputs: the step's inputs after the states, each with the axis of its source length.
    encoder_outputs: the encoder graph's outputs, each with the axis of its source length.
    """

    state_shapes: list[tuple[int, int]]
    cross_layers: list[int]
    source_inputs: dict[str, int]
    encoder_outputs: dict[str, int]


def cross_names(layer: int) -> tuple[str, str]:
    """The names of decoder layer ``layer``'s cross-attention keys and values (B, heads, S, head_dim)."""
    return f"cross_key_{layer}", f"cross_value_{layer}"


def graph_layout(model, example_source: torch.Tensor, start_token: int) -> GraphLayout:
    """The `GraphLayout` of ``model``, read from its cache after one forward of its own over
    ``example_source`` (B, S) ids (encoder-decoders; a causal LM reads one token of them) and, for an
    encoder-decoder, the decoder start token ``start_token``."""
    batch = example_source.shape[0]
    cache = model.new_cache()
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            start = torch.full((batch, 1), start_token, dtype=torch.long, device=example_source.device)
            model(input_ids=example_source, decoder_input_ids=start, cache=cache, use_cache=True)
        else:
            model(input_ids=example_source[:, :1], cache=cache, use_cache=True)
    conv_cache, cross_cache = split_cache(cache)
    state_shapes = [tuple(layer.window.shape[1:]) for layer in conv_cache.layers]
    if not model.config.is_encoder_decoder:
        return GraphLayout(state_shapes, [], {}, {})
    cross_layers = [index for index in range(len(cross_cache)) if cross_cache.get_seq_length(index) > 0]
    cross = {name: 2 for index in cross_layers for name in cross_names(index)}
    source_inputs = {**cross, SOURCE_MASK: 1} if cross_layers else {ENCODER_OUTPUT: 1, SOURCE_MASK: 1}
    return GraphLayout(state_shapes, cross_layers, source_inputs, {ENCODER_OUTPUT: 1, **cross})


class EncoderGraph(nn.Module):
    """input_ids (B, S), attention_mask (B, S) (1 at real tokens) -> the encoder output (B, S, d), then
    the cross-attention keys and values (B, heads, S, head_dim) of each layer of ``cross_layers``, by
    that decoder layer's own projection (as its cache computes them at a first step)."""

    def __init__(self, model, layout: GraphLayout):
        super().__init__()
        self.model = model
        self.cross_layers = layout.cross_layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.model.get_encoder()(input_ids, attention_mask=attention_mask).last_hidden_state
        layers = self.model.get_decoder().layers
        keys_values = []
        for index in self.cross_layers:
            keys_values.extend(layers[index].cross_attention.project_keys_values(hidden))
        return (hidden, *keys_values)


class DecodingStepGraph(nn.Module):
    """One decoding step of a generative head, through the head's own forward, every input and output a tensor.

    Inputs, flat and in this order:
        input_ids (B, 1) int64; positions (B, 1) int64, the token's position (the row's real tokens
        before it); token_mask (B, 1) int64, 0 where the token is padding (a left-padded prompt), else
        1; then each window of the cache (B, history_size, C) (`GraphLayout.state_shapes`); then, for
        encoder-decoders, the source's inputs (`GraphLayout.source_inputs`), one row per source, each
        source serving n consecutive step rows (B = sources x n: the beams of a sentence read its
        keys and values once, `layers.cross_attention.per_source`): each decoder layer's
        cross-attention keys and values, or the encoder output, and the source's attention_mask
        (sources, S).

    Outputs: logits (B, 1, V) of the next token (the head's output for ``logits_to_keep=1`` as it is:
    the graph ends at the LM head, with no node that copies its output), then each window as the
    forward left it (the old one moved on by one row): the shapes of the inputs.
    """

    def __init__(self, model, layout: GraphLayout):
        super().__init__()
        self.model = model
        self.layout = layout
        self.cache_class = type(model.new_cache())

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, token_mask: torch.Tensor, *rest: torch.Tensor):
        count = len(self.layout.state_shapes)
        windows, source = rest[:count], dict(zip(self.layout.source_inputs, rest[count:], strict=True))
        next_positions = positions[:, 0]
        if not self.model.config.is_encoder_decoder:
            cache = self.cache_class.from_state(windows, next_positions)
            out = self.model(
                input_ids=input_ids, attention_mask=token_mask, cache=cache, use_cache=True, logits_to_keep=1
            )
        else:
            keys_values = [tuple(source[name] for name in cross_names(index)) for index in self.layout.cross_layers]
            cache = self.cache_class.from_state(windows, next_positions, keys_values)
            encoder_output = source.get(ENCODER_OUTPUT)
            if encoder_output is None:  # the cached keys and values are all a step reads of the source:
                keys = keys_values[0][0]  # (B, S, 0), the source's length without its features
                encoder_output = keys.new_zeros(keys.shape[0], keys.shape[2], 0)
            out = self.model(
                encoder_outputs=(encoder_output,),
                attention_mask=source[SOURCE_MASK],
                decoder_input_ids=input_ids,
                decoder_attention_mask=token_mask,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        return (last_position(out.logits), *cache_windows(cache))


class PromptGraph(DecodingStepGraph):
    """A causal LM's whole prompt in one call: the head's own forward over T tokens per row with a new
    cache, as ``generate``'s first call runs it (each core's sequence form).

    Inputs: input_ids (B, T) int64; attention_mask (B, T) int64, 0 at (left) padding, else 1.

    Outputs: logits (B, 1, V) of the last position, then each window of the cache the forward filled
    (B, history_size, C), the step graph's state inputs for the token after the prompt.
    """

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        cache = self.model.new_cache()
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True, logits_to_keep=1
        )
        return (last_position(out.logits), *cache_windows(cache))


def last_position(logits: torch.Tensor) -> torch.Tensor:
    """The (B, 1, V) logits of the last position of (B, T, V) ``logits``: ``logits`` itself when T is 1
    (the heads keep one position for ``logits_to_keep=1``, so the graph's output is the LM head's own;
    ONNX Runtime would copy a squeeze of it into the output, 0.76 ms of a 32 x 5 beam step), else a slice."""
    return logits if logits.shape[1] == 1 else logits[:, -1:]


def cache_windows(cache) -> list[torch.Tensor]:
    """The windows (B, history_size, C) of a generation cache's layers, in layer order."""
    return [layer.window for layer in split_cache(cache)[0].layers]
