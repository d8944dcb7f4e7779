"""SliceNet (Kaiser, Gomez & Chollet 2017): separable convolution stacks with attention, for translation.

Data flow, as tensor2tensor's paper-era code (``attention_type="simple"``):

    source ids -> embeddings * sqrt(d) + timing -> encoder layers (ConvModules, padding zeroed) -> [dropout] = enc
    target ids (shifted right) -> embeddings * sqrt(d) = e
        -> IO mixer: ConvStep([attention(e, enc) ; e]) -> decoder layers (ConvModule + attention to enc)
        -> [dropout] -> LM head (tied to the embeddings, no bias)

The decoder's only sequence mixers are causal convolutions (the attention reads the source), so a
new token depends on a bounded history: the generation cache keeps, per causal
ConvStep, its last (k-1)*dilation inputs (`SliceNetDecoder.history_sizes`), and nothing grows.  A
decoding step convolves each new position from those windows (talk_hf.layers.slicenet_step) and
attends to the encoder output itself, which has no projected keys/values to cache: it costs the same
at every position.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithCrossAttentions

from ...layers.slicenet_attention import SliceAttention, TimingSignal, attention_bias
from ...layers.slicenet_conv import ConvInit, ConvModule, ConvStep
from ...layers.slicenet_layers import SliceNetDecoderLayer, SliceNetEncoderLayer, SliceNetIOMixer
from ...layers.slicenet_step import keeping_step_weights
from ...ops._backend import reads_backend_once
from ...transformers_internals import init, is_loaded_from_checkpoint, split_cache
from ..conv_modeling import ConvForConditionalGeneration, ConvPreTrainedModel, ConvSeq2SeqModel
from ..input_checks import InputNames, check_source_rows, embedding_positions
from .configuration_slicenet import SliceNetConfig


def conv_init(config: SliceNetConfig) -> ConvInit:
    """How the configuration initialises the convolutions."""
    return ConvInit(config.initializer, config.initializer_gain, config.init_std)


class _SliceNetStack(nn.Module):
    """Token embedding (scaled, with token dropout in training) and timing signal of a stack."""

    def __init__(self, config: SliceNetConfig, names: InputNames):
        super().__init__()
        self.names = names
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.token_dropout = config.token_dropout
        self.pad_token_id = config.pad_token_id
        self.timing = TimingSignal(
            config.d_model, config.timing_num_timescales, config.timing_min_timescale, config.timing_max_timescale
        )

    def embed(self, input_ids, inputs_embeds, attention_mask, cache=None, position_ids=None):
        """(B, T) ids or (B, T, d) embeddings -> ((B, T, d) scaled embeddings, (B or 1, T, d) timing signal).

        attention_mask: (B, T) or, with a cache, (B, past + T) with 1 at real tokens, or None; cache: the
        decoder's `ConvCache` (positions go on from it; it counts the new tokens) or None; position_ids:
        None or the positions the model counts (`check_position_ids`); every input is checked.
        In training, ``token_dropout`` of the ids become the pad id (t2t's symbol dropout).  The timing
        signal is counted from each row's first real token.
        """
        positions = embedding_positions(
            self.names, self.embed_tokens, input_ids, inputs_embeds, attention_mask, cache, position_ids
        )
        if inputs_embeds is None:
            if self.training and self.token_dropout > 0:
                dropped = torch.rand(input_ids.shape, device=input_ids.device) < self.token_dropout
                input_ids = input_ids.masked_fill(dropped, self.pad_token_id)
            inputs_embeds = self.embed_tokens(input_ids)
        embedded = inputs_embeds * self.embed_scale
        return embedded, self.timing(positions).to(embedded.dtype)


class SliceNetEncoder(_SliceNetStack):
    """InputEncoder(x) = ConvModule^L(x + timing): (B, S) ids -> `BaseModelOutput` (B, S, d), zero at padding."""

    def __init__(self, config: SliceNetConfig):
        super().__init__(config, InputNames())
        module_dropout = config.dropout if config.dropout_placement == "module" else 0.0
        self.layers = nn.ModuleList(
            SliceNetEncoderLayer(
                ConvModule(
                    config.d_model,
                    config.kernel_sizes,
                    config.dilations,
                    config.module_separabilities(),
                    causal=False,
                    residual=config.module_residual,
                    eps=config.layer_norm_eps,
                    conv_init=conv_init(config),
                ),
                module_dropout,
            )
            for _ in range(config.encoder_layers)
        )
        self.dropout = nn.Dropout(config.dropout if config.dropout_placement == "stack" else 0.0)

    @reads_backend_once
    def forward(
        self,
        input_ids=None,
        *,
        attention_mask=None,
        inputs_embeds=None,
        position_ids=None,
        output_attentions=False,
        output_hidden_states=False,
        return_dict=True,
    ) -> BaseModelOutput:
        """input_ids (B, S) or inputs_embeds (B, S, d); attention_mask (B, S) with 1 at real tokens; see
        `EncoderStack` (``output_attentions``: the encoder has no attention, there are no weights to return).

        ``hidden_states``: the input of each layer, then the (dropped out) output.
        """
        embedded, timing = self.embed(input_ids, inputs_embeds, attention_mask, position_ids=position_ids)
        hidden = embedded + timing
        padding_mask = None if attention_mask is None else attention_mask.bool()
        all_hidden = []
        for layer in self.layers:
            all_hidden.append(hidden)
            hidden = layer(hidden, padding_mask)
        hidden = self.dropout(hidden)
        all_hidden.append(hidden)
        outputs = BaseModelOutput(
            last_hidden_state=hidden, hidden_states=tuple(all_hidden) if output_hidden_states else None
        )
        return outputs if return_dict else outputs.to_tuple()


class SliceNetDecoder(_SliceNetStack):
    """Decoder(IOMixer(enc, e)) with causal convolutions; keeps its state in a `ConvCache`.

    Every causal `ConvStep` owns one history of the cache: ``cache_index`` numbers them in the order
    of `causal_steps` (IO mixer's attention, its mixing step, then each layer's module and attention).
    """

    def __init__(self, config: SliceNetConfig):
        super().__init__(config, InputNames("decoder_input_ids", "decoder_attention_mask"))
        d_model, eps, init_of_convs = config.d_model, config.layer_norm_eps, conv_init(config)

        def attention_block() -> SliceAttention:
            return SliceAttention(
                d_model,
                config.attention_kernel_sizes,
                config.attention_dilations,
                config.attention_separabilities(),
                config.attention_residual,
                eps,
                init_of_convs,
            )

        self.io_mixer = SliceNetIOMixer(
            attention_block(),
            ConvStep(
                2 * d_model,
                d_model,
                config.io_mixer_kernel_size,
                1,
                config.io_mixer_separability,
                causal=True,
                eps=eps,
                conv_init=init_of_convs,
            ),
        )
        module_dropout = config.dropout if config.dropout_placement == "module" else 0.0
        self.layers = nn.ModuleList(
            SliceNetDecoderLayer(
                ConvModule(
                    d_model,
                    config.kernel_sizes,
                    config.dilations,
                    config.module_separabilities(),
                    causal=True,
                    residual=config.module_residual,
                    eps=eps,
                    conv_init=init_of_convs,
                ),
                attention_block(),
                config.attention_residual,
                module_dropout,
            )
            for _ in range(config.decoder_layers)
        )
        self.dropout = nn.Dropout(config.dropout if config.dropout_placement == "stack" else 0.0)
        self.final_norm = nn.LayerNorm(d_model, eps=eps) if config.final_layer_norm else None
        for index, step in enumerate(self.causal_steps()):
            step.cache_index = index

    def causal_steps(self) -> list[ConvStep]:
        """The decoder's ConvSteps, in registration order (the order of their cache histories)."""
        return [module for module in self.modules() if isinstance(module, ConvStep)]

    def history_sizes(self) -> list[int]:
        """Per causal step, the number of past step inputs a new token needs.  Their sum R bounds the
        receptive field, target token t reaching the logits of positions t .. t + R; with t2t's
        residuals every step lies on one path and the bound is reached."""
        return [step.history_size for step in self.causal_steps()]

    @reads_backend_once
    def forward(
        self,
        input_ids=None,
        *,
        attention_mask=None,
        inputs_embeds=None,
        position_ids=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        past_key_values=None,
        output_attentions=False,
        output_hidden_states=False,
    ) -> BaseModelOutputWithCrossAttentions:
        """
        Args:
            input_ids: (B, T) new target tokens (or inputs_embeds (B, T, d)).
            attention_mask: (B, T) or (B, past + T) with 1 at real tokens, or None.
            position_ids: None, or the positions the model counts itself (`check_position_ids`).
            encoder_hidden_states / encoder_attention_mask: (B / n, S, d) encoder output and its (B / n, S)
                mask (or None), each source serving n consecutive rows (`check_source_rows`).
            past_key_values: the `ConvEncoderDecoderCache` (its `ConvCache` is updated in place), or None.

        Returns:
            ``last_hidden_state`` (B, T, d); when asked, ``hidden_states``: the IO mixer's output (the
            first layer's input) and each layer's output (the last one dropped out, then normalised
            with ``final_layer_norm``), and
            ``cross_attentions``: (B, 1, T, S) each, from the IO mixer and then each layer.
        """
        past_key_values, _ = split_cache(past_key_values)
        embedded, timing = self.embed(input_ids, inputs_embeds, attention_mask, past_key_values, position_ids)
        check_source_rows(encoder_hidden_states, embedded.shape[0], self.names.ids)
        padding_mask = None if attention_mask is None else attention_mask[:, -embedded.shape[1] :].bool()
        # The encoder output stays a tensor argument of each layer (checkpointed layers see what needs grad).
        source, source_bias = encoder_hidden_states, attention_bias(encoder_hidden_states, encoder_attention_mask)
        hidden, weights = self.io_mixer(embedded, timing, source, source_bias, padding_mask, past_key_values)
        all_hidden, all_weights = [], [weights]
        for layer in self.layers:
            all_hidden.append(hidden)
            hidden, weights = layer(hidden, timing, source, source_bias, padding_mask, past_key_values)
            all_weights.append(weights)
        hidden = self.dropout(hidden)
        if self.final_norm is not None:
            hidden = self.final_norm(hidden)
        all_hidden.append(hidden)
        return BaseModelOutputWithCrossAttentions(
            last_hidden_state=hidden,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            cross_attentions=tuple(weights.unsqueeze(1) for weights in all_weights) if output_attentions else None,
        )


class SliceNetPreTrainedModel(ConvPreTrainedModel):
    """t2t's initialisation and the blocks FSDP shards one by one (``_no_split_modules``)."""

    config_class = SliceNetConfig
    _no_split_modules = ["SliceNetEncoderLayer", "SliceNetIOMixer", "SliceNetDecoderLayer"]
    _supports_sdpa = False  # the attention has one head and no projections: plain matmuls

    def _init_weights(self, module: nn.Module) -> None:
        """Embeddings and an untied output projection N(0, d_model^-0.5) with a zero pad row, as in
        t2t; everything else as in every model of the package (LayerNorms 1 and 0; the convolutions,
        orthogonal in TensorFlow's orientation or normal, and the timing signal fill themselves)."""
        if isinstance(module, (nn.Embedding, nn.Linear)):  # the token embeddings, an untied LM head
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
            # Checked here: the row slice below loses the flag of a weight loaded from a checkpoint.
            loaded = is_loaded_from_checkpoint(module.weight)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None and not loaded:
                init.zeros_(module.weight[module.padding_idx])
        else:
            super()._init_weights(module)


class SliceNetModel(SliceNetPreTrainedModel, ConvSeq2SeqModel):
    """SliceNet encoder and decoder without a head; returns `Seq2SeqModelOutput` (decoder states).

    ``cross_attentions``: decoder_layers + 1 tensors (B, 1, T, S), the IO mixer's then each layer's.
    The cache's cross-attention half stays empty: the attention reads the encoder output itself,
    which generate() carries.
    """

    def build_encoder(self, config: SliceNetConfig) -> SliceNetEncoder:
        return SliceNetEncoder(config)

    def build_decoder(self, config: SliceNetConfig) -> SliceNetDecoder:
        return SliceNetDecoder(config)


class SliceNetForConditionalGeneration(SliceNetPreTrainedModel, ConvForConditionalGeneration):
    """SliceNet with its LM head (tied to the token embeddings), for translation."""

    base_model_class = SliceNetModel

    def generate(self, *args, **kwargs):
        """`transformers.GenerationMixin.generate`, with the decoder's convolutions deriving their
        decoding-step weights once per call (`keeping_step_weights`: no weight changes while it runs)."""
        with keeping_step_weights(self.model.decoder):
            return super().generate(*args, **kwargs)


__all__ = ["SliceNetForConditionalGeneration", "SliceNetModel", "SliceNetPreTrainedModel"]
