"""The generic convolutional models; the TaLK and DynamicConv families differ only in their core.

A family plugs in through its configuration: ``config.family`` (a `MixerFamily`) builds each
layer's mixer core with ``make_core(config, layer_idx, causal)``.  A family's model classes only
name their configuration class (and a head its base model class).  Data flows tokens -> embeddings
(scaled) + sinusoidal positions -> layers (mixer -> [cross-attention] -> FFN) -> [final LayerNorm
when pre-norm] -> LM head.

The stacks are called with keywords and return ModelOutputs (`EncoderStack`, `DecoderStack`), so
that SliceNet's stacks, or a new family's, fit the same models.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithCrossAttentions,
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)

from ..cache import ConvCache, ConvEncoderDecoderCache
from ..layers.conv_layers import ConvDecoderLayer, ConvEncoderLayer
from ..layers.cross_attention import CrossAttentionBlock, broadcast_source_mask
from ..layers.dropout import dropout
from ..layers.feed_forward import FeedForwardBlock
from ..layers.initialization import InitializesItself
from ..layers.linear_layer import Linear
from ..layers.mixer_block import MixerBlock, MixerCore, token_multiplier
from ..layers.sinusoidal_positions import SinusoidalPositions
from ..model_card import replace_new_card
from ..ops._backend import reads_backend_once
from ..ops.documents import DocumentEdges
from ..transformers_internals import (
    CACHE_NAME,
    EncoderDecoderChunkedPrefillMixin,
    FixedStateGenerationMixin,
    HeadClassKeepingResizeMixin,
    ModuleTiedWeightsMixin,
    SourceOncePerSentenceMixin,
    UploadHookMixin,
    activation_checkpointing_enabled,
    can_return_tuple,
    resolve_cache_argument,
    split_cache,
)
from .config_checks import check_config_of_model
from .input_checks import InputNames, check_mask_values, check_source_mask, check_source_rows, embedding_positions
from .keyword_checks import PACKING_ARGUMENTS, refuse_unknown_arguments
from .non_finite_weights import warn_about_non_finite_weights
from .packing import (
    PACKED_WITH_A_CACHE,
    PackedDocuments,
    check_handed_documents,
    document_positions,
    mask_document_starts,
    refuse_cores_without_documents,
    restarts_inside_rows,
)


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """(B, T) labels -> (B, T) decoder inputs: start token, then labels[:, :-1]; -100 becomes pad."""
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def _mixer_and_ffn(config, core: MixerCore, ffn_dim: int, normalize_before: bool):
    """The mixer block around ``core`` and the FFN block of one layer."""
    mixer = MixerBlock(
        config.d_model, config.conv_dim, core, config.use_glu, config.input_dropout, config.dropout, normalize_before
    )
    ffn = FeedForwardBlock(
        config.d_model, ffn_dim, config.activation_function, config.activation_dropout, config.dropout, normalize_before
    )
    return mixer, ffn


class _ConvStack(nn.Module):
    """Token embedding, positions, input dropout and optional final LayerNorm of a layer stack.

    Args:
        config: the model's configuration (``d_model``, ``scale_embedding``, ``position_offset``...).
        vocab_size: rows of this stack's token embedding.
        final_layer_norm: end with a LayerNorm (pre-norm stacks).
        names: the argument names that input errors mention.
    """

    def __init__(self, config, vocab_size: int, final_layer_norm: bool, names: InputNames):
        super().__init__()
        self.names = names
        self.embed_tokens = nn.Embedding(vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = SinusoidalPositions(config.d_model)
        self.position_offset = config.position_offset
        self.dropout = config.dropout
        self.final_layer_norm = nn.LayerNorm(config.d_model) if final_layer_norm else None

    def embed(
        self, input_ids, inputs_embeds, attention_mask, cache=None, position_ids=None, document_positions=None
    ) -> torch.Tensor:
        """(B, T) ids or (B, T, d) embeddings -> (B, T, d) scaled embeddings + positions, dropped out.

        attention_mask: (B, T) or, with a cache, (B, past + T) with 1 at real tokens, or None; cache: the
        decoder's `ConvCache` (positions go on from it; it counts the new tokens) or None; position_ids:
        None or the positions the model counts (`check_position_ids`); document_positions: (B, T)
        positions taken as they are (packed documents), or None; every input is checked.
        """
        positions = embedding_positions(
            self.names,
            self.embed_tokens,
            input_ids,
            inputs_embeds,
            attention_mask,
            cache,
            position_ids,
            document_positions,
        )
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = positions + self.position_offset
        hidden = inputs_embeds * self.embed_scale + self.embed_positions(positions).to(inputs_embeds.dtype)
        return dropout(hidden, self.dropout, self.training)

    def finish(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden if self.final_layer_norm is None else self.final_layer_norm(hidden)


class EncoderStack(Protocol):
    """What a seq2seq model needs of its encoder (`ConvEncoder`, `SliceNetEncoder`)."""

    embed_tokens: nn.Embedding  # the source embeddings

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
    ) -> BaseModelOutput:
        """Source ids (B, S) or embeddings (B, S, d), mask (B, S), position_ids (checked, see
        `check_position_ids`) -> `BaseModelOutput` with ``last_hidden_state`` (B, S, d) and, when asked,
        ``hidden_states`` (each (B, S, d)); a tuple when ``return_dict`` is False.

        No ``**kwargs``: ``generate()`` then passes the encoder only the keywords it names (it would
        pass all it got, ``labels`` and ``logits_to_keep`` among them); the head refuses the rest."""


class DecoderStack(Protocol):
    """What the models need of a decoder (`ConvDecoder`, `SliceNetDecoder`)."""

    embed_tokens: nn.Embedding  # the target embeddings

    def history_sizes(self) -> list[int]:
        """The history sizes of its `ConvCache`, one per cached causal mixer."""

    def __call__(
        self,
        input_ids: torch.Tensor | None = None,
        *,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values=None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutputWithCrossAttentions:
        """Target ids (B, T) or embeddings (B, T, d), mask (B, past + T), position_ids (checked), the
        encoder output (B, S, d) and mask (B, S) (seq2seq), the generation cache (updated in place) ->
        ``last_hidden_state`` (B, T, d) and, when asked, ``hidden_states`` and ``cross_attentions``."""


class ConvEncoder(_ConvStack):
    """Bidirectional mixer layers over the source; (B, S) ids -> `BaseModelOutput` (B, S, d)."""

    def __init__(self, config):
        super().__init__(config, config.vocab_size, config.encoder_normalize_before, InputNames())
        self.layers = nn.ModuleList(
            ConvEncoderLayer(
                *_mixer_and_ffn(
                    config,
                    config.family.make_core(config, index, causal=False),
                    config.encoder_ffn_dim,
                    config.encoder_normalize_before,
                )
            )
            for index in range(config.encoder_layers)
        )

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
        `EncoderStack` (``output_attentions``: the mixers are convolutions, there are no weights to return)."""
        hidden = self.embed(input_ids, inputs_embeds, attention_mask, position_ids=position_ids)
        real_tokens = token_multiplier(attention_mask, hidden.shape[1], hidden.dtype)
        all_hidden = []
        for layer in self.layers:
            all_hidden.append(hidden)
            hidden = layer(hidden, real_tokens)
        hidden = self.finish(hidden)
        all_hidden.append(hidden)
        outputs = BaseModelOutput(
            last_hidden_state=hidden, hidden_states=tuple(all_hidden) if output_hidden_states else None
        )
        return outputs if return_dict else outputs.to_tuple()


class ConvDecoder(_ConvStack):
    """Causal mixer layers (with cross-attention for seq2seq); keeps its state in a `ConvCache`."""

    def __init__(self, config, cross_attention: bool):
        names = InputNames("decoder_input_ids", "decoder_attention_mask") if cross_attention else InputNames()
        vocab_size = config.decoder_vocab_size if cross_attention else config.vocab_size
        final_layer_norm = config.decoder_normalize_before and config.decoder_final_layer_norm
        super().__init__(config, vocab_size, final_layer_norm, names)
        self.layers = nn.ModuleList(
            ConvDecoderLayer(
                index,
                *_mixer_and_ffn(
                    config,
                    config.family.make_core(config, index, causal=True),
                    config.decoder_ffn_dim,
                    config.decoder_normalize_before,
                ),
                CrossAttentionBlock(
                    config.d_model,
                    config.decoder_attention_heads,
                    config.attention_dropout,
                    config.dropout,
                    config.decoder_normalize_before,
                )
                if cross_attention
                else None,
            )
            for index in range(config.decoder_layers)
        )

    def history_sizes(self) -> list[int]:
        """Per layer, the number of past mixer inputs a causal step needs."""
        return [layer.mixer.core.history_size for layer in self.layers]

    def new_cache(self) -> ConvCache:
        """An empty generation state sized for these layers."""
        return ConvCache(self.history_sizes())

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
        document_positions=None,
        document_edges=None,
    ) -> BaseModelOutputWithCrossAttentions:
        """
        Args:
            input_ids: (B, T) new target tokens (or inputs_embeds (B, T, d)).
            attention_mask: (B, T) or (B, past + T) with 1 at real tokens, or None.
            position_ids: None, or the positions the model counts itself (`check_position_ids`).
            encoder_hidden_states / encoder_attention_mask: (B / n, S, d) and (B / n, S) for seq2seq, each
                source serving n consecutive rows (`check_source_rows`; n = 1 but in exported beam steps), else None.
            past_key_values: `ConvCache` / `EncoderDecoderCache` updated in place, or None.
            document_positions: (B, T) each token's position within its document (packed rows,
                `packing.document_positions`), or None: embedded as they are.
            document_edges: their `DocumentEdges`, or None: without a past every mixer's window
                stops at its document's edges.

        Returns:
            ``last_hidden_state`` (B, T, d); ``hidden_states`` (each layer's input, then the output)
            and ``cross_attentions`` (B, heads, T, S) per layer when asked, else None.
        """
        conv_cache = split_cache(past_key_values)[0]
        windows_continue = conv_cache is not None and conv_cache.has_past
        hidden = self.embed(input_ids, inputs_embeds, attention_mask, conv_cache, position_ids, document_positions)
        if encoder_hidden_states is not None:
            check_source_rows(encoder_hidden_states, hidden.shape[0], self.names.ids)
        real_tokens = token_multiplier(attention_mask, hidden.shape[1], hidden.dtype)
        source_mask = broadcast_source_mask(encoder_attention_mask)
        all_hidden, all_weights = [], []
        for layer in self.layers:
            all_hidden.append(hidden)
            hidden, weights = layer(
                hidden,
                real_tokens,
                encoder_hidden_states,
                source_mask,
                past_key_values=past_key_values,
                output_attentions=output_attentions,
                document_edges=None if windows_continue else document_edges,
            )
            all_weights.append(weights)
        hidden = self.finish(hidden)
        all_hidden.append(hidden)
        return BaseModelOutputWithCrossAttentions(
            last_hidden_state=hidden,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            cross_attentions=tuple(all_weights) if output_attentions and encoder_hidden_states is not None else None,
        )


class ConvPreTrainedModel(
    FixedStateGenerationMixin, HeadClassKeepingResizeMixin, ModuleTiedWeightsMixin, UploadHookMixin, PreTrainedModel
):
    """Weight init, cache policy and HF switches shared by every model of the package.

    Subclasses set ``config_class``.  A base model provides ``new_cache()``: the empty fixed-size
    generation state of its decoder, which ``generate`` puts in place before the first forward (see
    `FixedStateGenerationMixin`).
    """

    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    # The blocks FSDP shards one by one (Accelerate's TRANSFORMER_BASED_WRAP reads this, and fails on
    # a class the model does not hold: the decoder-only models override it).
    _no_split_modules = ["ConvEncoderLayer", "ConvDecoderLayer"]
    _skip_keys_device_placement = ["cache", "past_key_values"]  # the name from transformers 5.24, and before
    _supports_sdpa = True  # the cross-attention always runs scaled_dot_product_attention
    # `talk_hf.hub.refresh_remote_code`, set as talk_hf imports talk_hf.hub (the module copies that
    # export_for_remote_code writes lack hub.py: saving a model loaded from them is transformers' custom_object_save).
    refresh_remote_code: Callable[[Path], None] | None = None

    def __init__(self, config, *inputs, **kwargs):
        check_config_of_model(type(self), config)  # a field set by setattr skipped the configuration's checks
        super().__init__(config, *inputs, **kwargs)

    def _init_weights(self, module: nn.Module) -> None:
        """transformers' initialisation of the standard modules (normal(0, ``init_std``) linear maps
        and embeddings, LayerNorms 1 and 0), then the module's own, if it has any (`InitializesItself`)."""
        super()._init_weights(module)
        if isinstance(module, InitializesItself):
            module.init_weights()

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loading, then a `NonFiniteWeightsWarning` naming the folder and every weight that
        holds NaN or inf values (transformers loads them without a word)."""
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        warn_about_non_finite_weights(loaded[0] if isinstance(loaded, tuple) else loaded, pretrained_model_name_or_path)
        return loaded

    def save_pretrained(self, save_directory, is_main_process: bool = True, *args, **kwargs):
        """transformers' saving; then, where ``save_directory`` holds the module copies of an earlier
        `talk_hf.export_for_remote_code`, that export again (`refresh_remote_code`), as `before_upload` does
        before a push: config.json keeps its ``auto_map``, which transformers' saving drops, and the copies become
        the code of the talk_hf that wrote the new config.json."""
        saved = super().save_pretrained(save_directory, is_main_process, *args, **kwargs)
        if is_main_process and self.refresh_remote_code is not None:
            self.refresh_remote_code(Path(save_directory))
        return saved

    def before_upload(self, folder: Path, repo_id: str, token) -> None:
        """Before ``push_to_hub`` (and ``save_pretrained(..., push_to_hub=True)``) uploads ``folder``: export
        it again where it holds an earlier export's module copies (`refresh_remote_code`), then put talk_hf's model
        card (`talk_hf.model_card.checkpoint_model_card`: ``library_name: talk_hf``, the tags ``talk_hf`` and the
        model type before transformers', the pipeline tag, how to load it) in place of transformers' generic one
        where the repository has no README.md (`talk_hf.model_card.replace_new_card`)."""
        if self.refresh_remote_code is not None:
            self.refresh_remote_code(folder)
        replace_new_card(folder, repo_id, self.can_generate(), token)

    def _switch(self, name: str, value: bool | None) -> bool:
        """An output switch (``output_hidden_states``, ...): the argument when given, so that an
        explicit False wins over the config, else the config's value."""
        return bool(getattr(self.config, name) if value is None else value)

    def _cache_for_forward(self, use_cache: bool | None, cache, past_key_values, new_cache: Callable):
        """The cache this forward fills: the given one (under either name, see
        `resolve_cache_argument`), a new one, or None when caching is off (``use_cache`` False, or
        training with gradient checkpointing)."""
        cache = resolve_cache_argument(cache, past_key_values)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if not use_cache or (self.training and activation_checkpointing_enabled(self)):
            return None
        cache = new_cache() if cache is None else cache
        conv_cache, _ = split_cache(cache)
        if not isinstance(conv_cache, ConvCache):
            raise TypeError(
                f"the generation cache (`cache`, or `past_key_values` before transformers 5.24) must be the "
                f"ConvCache (or EncoderDecoderCache around one) that this model returned, got "
                f"{type(conv_cache).__name__}"
            )
        return cache


class ConvSeq2SeqModel(ConvPreTrainedModel):
    """Encoder + decoder with cross-attention; returns `Seq2SeqModelOutput` (decoder states).

    A family plugs in its mixer core (``config.family``), or its own stacks by overriding
    ``build_encoder`` / ``build_decoder`` (SliceNet): any `EncoderStack` and `DecoderStack`.
    """

    accepts_loss_kwargs = False  # no loss: Trainer must not pass it num_items_in_batch

    def __init__(self, config):
        super().__init__(config)
        self.encoder = self.build_encoder(config)
        self.decoder = self.build_decoder(config)
        if config.share_encoder_decoder_embeddings:
            # One module, not two tied ones: FSDP2 groups modules, and a weight reachable through a
            # module outside the group that holds the embeddings would be sharded twice.  Declared as
            # a tie all the same, for save_pretrained (see `ModuleTiedWeightsMixin`); the decoder's
            # name is the one checkpoints hold.
            self.encoder.embed_tokens = self.decoder.embed_tokens
            self._tied_weights_keys = {"encoder.embed_tokens.weight": "decoder.embed_tokens.weight"}
        self.post_init()

    def build_encoder(self, config) -> EncoderStack:
        return ConvEncoder(config)

    def build_decoder(self, config) -> DecoderStack:
        return ConvDecoder(config, cross_attention=True)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:
            self.encoder.embed_tokens = value

    def new_cache(self) -> ConvEncoderDecoderCache:
        return ConvEncoderDecoderCache(self.decoder.history_sizes())

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        past_key_values=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """Source (B, S) and target (B, T) ids with their masks; see `Seq2SeqModelOutput`.  The
        generation cache comes as ``cache`` (transformers >= 5.24) or ``past_key_values``.

        Through ``kwargs`` it takes only ``position_ids`` (B, S) and ``decoder_position_ids`` (B, T), which
        must equal the positions the model counts from the masks (`check_position_ids`; the source's are
        checked when the encoder runs); any other keyword is refused (`refuse_unknown_arguments`).
        """
        refuse_unknown_arguments(self, kwargs, taken=("position_ids", "decoder_position_ids"))
        output_hidden_states = self._switch("output_hidden_states", output_hidden_states)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                position_ids=kwargs.get("position_ids"),
                output_hidden_states=output_hidden_states,
            )
        else:
            if not isinstance(encoder_outputs, BaseModelOutput):
                encoder_outputs = BaseModelOutput(*encoder_outputs)
            check_source_mask(attention_mask, encoder_outputs.last_hidden_state)
            check_mask_values("attention_mask", attention_mask)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("pass decoder_input_ids (or labels, which are shifted into decoder_input_ids)")
        cache = self._cache_for_forward(use_cache, cache, past_key_values, self.new_cache)
        decoder_outputs = self.decoder(
            decoder_input_ids,
            attention_mask=decoder_attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            position_ids=kwargs.get("decoder_position_ids"),
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=cache,
            output_attentions=self._switch("output_attentions", output_attentions),
            output_hidden_states=output_hidden_states,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: cache},
            decoder_hidden_states=decoder_outputs.hidden_states,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )


class ConvHeadBase(ConvPreTrainedModel, GenerationMixin):
    """A base model (``self.model``) plus an LM head, tied to the target embeddings when
    ``tie_word_embeddings``.  Subclasses set ``base_model_class``."""

    _tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
    base_model_class: type[ConvPreTrainedModel]

    def __init__(self, config):
        super().__init__(config)
        self.model = self.base_model_class(config)
        # The head predicts the tokens its decoder reads: the target vocabulary.
        target_vocab_size = self.model.get_input_embeddings().num_embeddings
        self.lm_head = Linear(config.d_model, target_vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def new_cache(self):
        return self.model.new_cache()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value


class ConvForConditionalGeneration(SourceOncePerSentenceMixin, EncoderDecoderChunkedPrefillMixin, ConvHeadBase):
    """Seq2seq model + LM head; subclasses set ``base_model_class`` (the family's `ConvSeq2SeqModel`).

    ``generate`` hands the decoder each sentence's source once for all its rows (beams, returned sequences:
    `SourceOncePerSentenceMixin`), so the cache holds its cross-attention keys and values once per sentence
    and beam search reorders only the decoder's state (`ConvEncoderDecoderCache.reorder_cache`).
    """

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        """Resize the target vocabulary (decoder embeddings and LM head; the source's too when they
        are shared).  transformers writes the new size into ``vocab_size``; with separate source
        and target embeddings it belongs in ``decoder_vocab_size``, and ``vocab_size`` (the
        source's) stays."""
        source_vocab_size = self.config.vocab_size
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        if getattr(self.config, "decoder_vocab_size", None) is not None:
            self.config.decoder_vocab_size = embeddings.num_embeddings
            if not self.config.share_encoder_decoder_embeddings:
                self.config.vocab_size = source_vocab_size
        return embeddings

    @can_return_tuple
    @reads_backend_once
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        logits_to_keep: int = 0,
        past_key_values=None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """As the base model, plus ``labels`` (B, T) (-100 = ignored; decoder inputs are made from them
        when not given), ``logits_to_keep`` (compute logits for the last N positions only; 0 = all) and,
        through ``kwargs``, ``num_items_in_batch`` (the loss is summed and divided by it, as ``Trainer``
        passes it under gradient accumulation)."""
        refuse_unknown_arguments(self, kwargs, taken=("num_items_in_batch", "position_ids", "decoder_position_ids"))
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=resolve_cache_argument(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            position_ids=kwargs.get("position_ids"),
            decoder_position_ids=kwargs.get("decoder_position_ids"),
        )
        logits = self.lm_head(outputs.last_hidden_state[:, -logits_to_keep:])
        loss = None
        if labels is not None:
            # Labels are already aligned with the logits: pass them as shift_labels (no second shift).
            loss = self.loss_function(
                logits, None, logits.shape[-1], shift_labels=labels, num_items_in_batch=kwargs.get("num_items_in_batch")
            )
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
        )


class ConvLMModel(ConvPreTrainedModel):
    """Decoder-only stack; returns `BaseModelOutputWithPast`."""

    _no_split_modules = ["ConvDecoderLayer"]
    accepts_loss_kwargs = False  # no loss: Trainer must not pass it num_items_in_batch

    def __init__(self, config):
        super().__init__(config)
        self.decoder = ConvDecoder(config, cross_attention=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value

    def new_cache(self) -> ConvCache:
        return self.decoder.new_cache()

    def _documents(self, input_ids, inputs_embeds, attention_mask, kwargs: dict) -> PackedDocuments | None:
        """The `PackedDocuments` of this forward: those a causal-LM head derived and handed over as
        ``packed_documents`` (checked), else derived here, once, from ``position_ids`` and the packing
        keywords of ``kwargs``; or None (none given, or no tokens to check them against, which the
        decoder then refuses).  ``packed``: a packing keyword, or ``position_ids`` restarting after a
        row's first real token (not read inside a compiled graph)."""
        tokens = input_ids if input_ids is not None else inputs_embeds
        packing = {name: kwargs[name] for name in PACKING_ARGUMENTS if kwargs.get(name) is not None}
        handed = kwargs.get("packed_documents")
        described = kwargs.get("position_ids") is not None or packing or handed is not None
        if tokens is None or tokens.dim() < 2 or not described:
            return None
        batch, length = tokens.shape[:2]
        if handed is not None:
            return check_handed_documents(handed, kwargs, batch, length)
        positions = document_positions(kwargs.get("position_ids"), packing, batch, length, tokens.device)
        edges = DocumentEdges(positions)
        packed = bool(packing) or (
            not torch.compiler.is_compiling() and restarts_inside_rows(positions, attention_mask)
        )
        if packed:
            refuse_cores_without_documents(self.decoder.layers)
        return PackedDocuments(positions, edges, packed)

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        cache=None,
        inputs_embeds=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        past_key_values=None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """input_ids (B, T); attention_mask (B, T) or (B, past + T) with 1 at real tokens (left padding
        allowed); the generation cache as ``cache`` (transformers >= 5.24) or ``past_key_values``.
        ``output_attentions``: the mixers are convolutions, there are no attention weights to return.

        Through ``kwargs`` it takes ``position_ids`` (B, T) (each token's position within its document:
        embedded as given, and a 0 after a row's first real token starts a new document there) and the
        other descriptions of packed rows that transformers' ``DataCollatorWithFlattening`` gives:
        ``cu_seq_lens_q/k``, ``max_length_q/k``, ``seq_idx`` (`packing.document_positions`), or instead
        ``packed_documents``, the `packing.PackedDocuments` a causal-LM head already derived from them.
        Packed rows are computed as if each document were alone, without a generation cache (none is
        made unless ``use_cache=True`` asks, which is refused).  Any other keyword is refused
        (`refuse_unknown_arguments`).
        """
        refuse_unknown_arguments(self, kwargs, taken=("position_ids", *PACKING_ARGUMENTS, "packed_documents"))
        documents = self._documents(input_ids, inputs_embeds, attention_mask, kwargs)
        packed = documents is not None and documents.packed
        if packed and use_cache is None and resolve_cache_argument(cache, past_key_values) is None:
            use_cache = False
        cache = self._cache_for_forward(use_cache, cache, past_key_values, self.new_cache)
        if packed and cache is not None:
            raise ValueError(PACKED_WITH_A_CACHE)
        decoder_outputs = self.decoder(
            input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            past_key_values=cache,
            output_hidden_states=self._switch("output_hidden_states", output_hidden_states),
            document_positions=None if documents is None else documents.positions,
            document_edges=None if documents is None else documents.edges,
        )
        return BaseModelOutputWithPast(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: cache},
            hidden_states=decoder_outputs.hidden_states,
        )


class ConvForCausalLM(ConvHeadBase):
    """Decoder-only LM; subclasses set ``base_model_class`` (the family's `ConvLMModel`)."""

    _no_split_modules = ConvLMModel._no_split_modules

    @can_return_tuple
    @reads_backend_once
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        cache=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        logits_to_keep: int = 0,
        past_key_values=None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """As the base model, plus ``labels`` (B, T) (shifted inside the loss; -100 = ignored),
        ``logits_to_keep`` (logits for the last N positions only; 0 = all) and, through ``kwargs``,
        ``shift_labels`` (B, T) (targets already aligned with the logits, as transformers passes them
        under sequence or context parallelism: used instead of shifting ``labels``) and
        ``num_items_in_batch`` (the loss is summed and divided by it, as ``Trainer`` passes it under
        gradient accumulation).  In packed rows the loss never asks a document's last token for the
        next document's first one.  The documents are derived once, here, and handed to the base model."""
        document_keywords = ("position_ids", *PACKING_ARGUMENTS)
        refuse_unknown_arguments(self, kwargs, taken=("num_items_in_batch", "shift_labels", *document_keywords))
        shift_labels = kwargs.get("shift_labels")
        if labels is not None or shift_labels is not None:
            use_cache = False
        cache = resolve_cache_argument(cache, past_key_values)
        documents = self.model._documents(input_ids, inputs_embeds, attention_mask, kwargs)
        described = {name: kwargs[name] for name in document_keywords if name in kwargs}
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            **(described if documents is None else {"packed_documents": documents}),
        )
        logits = self.lm_head(outputs.last_hidden_state[:, -logits_to_keep:])
        loss = None
        if documents is not None and labels is not None:
            labels = mask_document_starts(labels, documents.positions, shifted=False)
        if documents is not None and shift_labels is not None:
            shift_labels = mask_document_starts(shift_labels, documents.positions, shifted=True)
        if labels is not None or shift_labels is not None:
            loss = self.loss_function(
                logits,
                labels,
                logits.shape[-1],
                shift_labels=shift_labels,
                num_items_in_batch=kwargs.get("num_items_in_batch"),
            )
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, **{CACHE_NAME: getattr(outputs, CACHE_NAME)}, hidden_states=outputs.hidden_states
        )
