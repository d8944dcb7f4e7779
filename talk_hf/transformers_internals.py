"""Every use of transformers' semi-internal API, in one place.

The package otherwise imports only transformers' documented top-level names (``PreTrainedModel``,
``PretrainedConfig``, ``GenerationMixin``, the ``modeling_outputs`` dataclasses).  What follows is
public enough to rely on but not promised stable across 5.x minor releases: a release that moves
or renames one of these breaks this file only.  Each item says what it is, why the package needs
it, and which releases it is checked against (5.17, 5.23 and 5.24; the CI runs the oldest and the
newest).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import FrameType

import torch
from transformers import GenerationConfig, PreTrainedModel

# Guarded weight initialisers (``init.normal_``, ``init.copy_`` ...) that skip weights loaded from a
# checkpoint; ``PreTrainedModel._init_weights`` overrides must use them (transformers 5.x).
from transformers import initialization as init

# Activation functions by name, as in the built-in models' configs (``activations.ACT2FN``).
from transformers.activations import ACT2FN

# Cache base classes (``transformers.cache_utils``).  ``CacheLayerMixin`` is the per-layer state
# protocol (``lazy_initialization``, ``get_seq_length``, ``reorder_cache``, ``crop``, batch ops,
# ``is_initialized``) that `ConvHistoryLayer` implements; ``Cache`` holds a list of such layers.
# ``EncoderDecoderCache`` pairs a decoder cache with a ``DynamicCache`` of cross-attention keys/values.
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache, EncoderDecoderCache

# The base class that makes a layer recomputable under gradient checkpointing (``modeling_layers``).
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

# transformers' logger, for its ``warning_once`` (``transformers.utils.logging``).
from transformers.utils import logging

# ``@can_return_tuple`` turns a model output into a tuple when ``return_dict=False`` (or the config
# says so), as every built-in model's forward does.  Lives in ``transformers.utils.generic``.
from transformers.utils.generic import can_return_tuple

# The mixin whose ``push_to_hub`` creates the Hub repository, saves with ``save_pretrained`` and uploads
# (``transformers.utils.hub``); `is_push_to_hub` recognises its frame.
from transformers.utils.hub import PushToHubMixin

__all__ = [
    "ACT2FN",
    "CACHE_NAME",
    "Cache",
    "CacheLayerMixin",
    "DynamicCache",
    "EncoderDecoderCache",
    "EncoderDecoderChunkedPrefillMixin",
    "FixedStateEncoderDecoderCache",
    "FixedStateGenerationMixin",
    "GradientCheckpointingLayer",
    "HeadClassKeepingResizeMixin",
    "ModuleTiedWeightsMixin",
    "SourceOncePerSentenceMixin",
    "activation_checkpointing_enabled",
    "is_loaded_from_checkpoint",
    "is_push_to_hub",
    "is_save_pretrained",
    "can_return_tuple",
    "cross_attention_keys_values",
    "generate_defaults",
    "init",
    "resolve_cache_argument",
    "split_cache",
]

logger = logging.get_logger(__name__)

# The name of the generation cache, as a model-output field and as the keyword ``generate`` passes
# to a forward: ``past_key_values`` up to 5.23, ``cache`` from 5.24 (whose outputs still accept and
# return the old name, with a deprecation warning, but whose ``generate`` passes only ``cache``).
CACHE_NAME = "cache" if "cache" in {field.name for field in fields(CausalLMOutputWithPast)} else "past_key_values"


def resolve_cache_argument(cache, past_key_values):
    """The generation cache given to a forward under either name (``cache``, transformers >= 5.24,
    or ``past_key_values``, the name before it), or None.  Both at once is an error."""
    if past_key_values is None:
        return cache
    if cache is not None:
        raise ValueError(
            "pass the generation cache as `cache` or as `past_key_values` (its name before transformers 5.24), not both"
        )
    return past_key_values


def activation_checkpointing_enabled(model: torch.nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on.

    transformers 5.23 renamed ``PreTrainedModel.is_gradient_checkpointing`` to
    ``is_activation_checkpointing`` (the old property warns); 5.17 has only the old name.
    """
    if hasattr(type(model), "is_activation_checkpointing"):
        return model.is_activation_checkpointing
    return model.is_gradient_checkpointing


def generate_defaults() -> dict:
    """The values ``generate`` gives the settings that neither its call nor the model's generation configuration
    sets (``GenerationConfig._get_default_generation_params``, a static method in 5.17 and 5.24); its
    ``max_length`` then counts new tokens after the prompt (``GenerationMixin._prepare_generated_length``)."""
    return GenerationConfig._get_default_generation_params()


def split_cache(past_key_values) -> tuple[Cache | None, Cache | None]:
    """``(decoder_cache, cross_attention_cache)`` of an ``EncoderDecoderCache``, of a decoder-only
    cache (cross part None), or of None.

    Reads ``EncoderDecoderCache.self_attention_cache`` / ``.cross_attention_cache``: attributes, not
    methods, of transformers' class.
    """
    if past_key_values is None:
        return None, None
    if isinstance(past_key_values, EncoderDecoderCache):
        return past_key_values.self_attention_cache, past_key_values.cross_attention_cache
    return past_key_values, None


def cross_attention_keys_values(cache: DynamicCache | None, layer_idx: int, compute: Callable):
    """A layer's cross-attention keys and values: from ``cache`` when it holds them, else
    ``compute()`` (-> ``(keys, values)``, each (B, heads, S, head_dim)), stored into ``cache``.

    Reads the ``keys`` / ``values`` tensors of a ``DynamicCache`` layer directly: ``update`` would
    append the encoder keys again at every decoding step.
    """
    if cache is not None and cache.get_seq_length(layer_idx) > 0:
        return cache.layers[layer_idx].keys, cache.layers[layer_idx].values
    keys, values = compute()
    if cache is not None:
        cache.update(keys, values, layer_idx)
    return keys, values


class FixedStateEncoderDecoderCache(EncoderDecoderCache):
    """An ``EncoderDecoderCache`` whose decoder half may be a fixed-size (non-``DynamicCache``) cache.

    transformers' batch operations on an ``EncoderDecoderCache`` (repeat/select rows for contrastive
    search, ``crop`` to roll back rejected draft tokens in assisted decoding) first call the
    internal ``check_dynamic_cache``, which accepts only ``DynamicCache`` halves.  Subclasses whose
    decoder cache implements those operations itself name its class in ``decoder_cache_class``.
    """

    decoder_cache_class: type[Cache]

    def check_dynamic_cache(self, method: str) -> None:
        if not isinstance(self.self_attention_cache, self.decoder_cache_class):
            super().check_dynamic_cache(method)


class FixedStateGenerationMixin:
    """The two ``GenerationMixin`` hooks a model with its own fixed-size cache overrides.

    The model provides ``new_cache()`` (an empty cache for one generation).

    * ``_supports_default_dynamic_cache`` -> False: ``generate`` must not build a ``DynamicCache``.
      A ``cache_implementation`` (``"static"``, ``"offloaded"``, ...) would then be ignored with
      transformers' message that the model "does not support `Cache` instances", which is untrue
      here: the model says itself that it keeps its own fixed-size state.
    * ``_prepare_cache_for_generation(generation_config, model_kwargs, ...)``: refuse an
      encoder-decoder's ``guidance_scale`` before the first step (classifier-free guidance's
      unconditional forward gives the decoder no source; without the refusal the forward would fail
      on it, naming ``decoder_input_ids``).  Then, after transformers'
      own checks (a user cache, ``use_cache=False``), put ``new_cache()`` into
      ``model_kwargs[CACHE_NAME]``.  Assisted decoding requires a cache before the first
      forward, and an assistant model's cache must record its past (``activate_past_recording``) so
      that rejected draft tokens can be rolled back; transformers does that only for caches it
      builds itself.  Same signature in 5.17 to 5.24.
    * ``_valid_auto_compile_criteria(model_kwargs, generation_config)``: the decoding steps are
      compiled exactly when a ``compile_config`` is given, on any device.  transformers would compile
      every ``generate`` on a GPU once the cache says it is compileable (ours always is: fixed
      shapes, updated in place), and never on the CPU unless the private
      ``CompileConfig._compile_all_devices`` is set; here the user's ``compile_config`` decides.
    * ``create_masks_for_generate(...)``: ``generate`` turns the 2D attention mask into a 4D
      attention mask over a static cache's length when the cache is compileable; the convolutions
      read a 2D mask (padding and positions), and need only the new tokens' columns of it, since the
      cache counts each row's real tokens so far: the (B, T) columns of the T new tokens are returned.
      The mask ``generate`` keeps grows a column per step; this one keeps its shape, so a compiled step
      has fixed shapes (and strides: a copy, which 5.24 makes itself and 5.17 does not).  Keyword names
      differ between 5.17 (``past_key_values``) and 5.24 (``cache``): only ``inputs_embeds`` (its shape)
      and ``attention_mask`` are read.
    """

    new_cache: Callable[[], Cache]

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, *args, **kwargs):
        if self.config.is_encoder_decoder and generation_config.guidance_scale not in (None, 1):
            raise ValueError(
                f"{type(self).__name__} cannot apply guidance_scale={generation_config.guidance_scale}: classifier-free "
                "guidance runs an unconditional forward of the decoder alone, without a source, which an "
                "encoder-decoder cannot; generate without guidance_scale"
            )
        if generation_config.cache_implementation is not None and model_kwargs.get(CACHE_NAME) is None:
            logger.warning_once(
                f"{type(self).__name__} keeps its own fixed-size decoding state (a history of the last inputs of "
                f"each layer, whatever the length): cache_implementation={generation_config.cache_implementation!r} "
                "is ignored."
            )
            generation_config.cache_implementation = None  # generate's own copy of the configuration
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        if model_kwargs.get(CACHE_NAME) is None and generation_config.use_cache:
            model_kwargs[CACHE_NAME] = self.new_cache()
            if generation_config.is_assistant:
                model_kwargs[CACHE_NAME].activate_past_recording()

    def _valid_auto_compile_criteria(self, model_kwargs: dict, generation_config) -> bool:
        compile_config = generation_config.compile_config
        if compile_config is None:
            return False
        if not compile_config._compile_all_devices:
            compile_config = copy.copy(compile_config)
            compile_config._compile_all_devices = True  # asked for by the user: compile on the CPU too
            generation_config = copy.copy(generation_config)
            generation_config.compile_config = compile_config
        return super()._valid_auto_compile_criteria(model_kwargs, generation_config)

    def create_masks_for_generate(self, config, inputs_embeds, attention_mask, *args, **kwargs):
        if attention_mask is None:
            return None
        new_columns = attention_mask[:, attention_mask.shape[1] - inputs_embeds.shape[1] :]
        return new_columns.clone(memory_format=torch.contiguous_format)  # same strides at every step


# The model_kwargs key under which `EncoderDecoderChunkedPrefillMixin` keeps the source mask.
_SOURCE_MASK_WHILE_CHUNKED = "source_attention_mask_while_chunked"


class EncoderDecoderChunkedPrefillMixin:
    """A chunked prefill (``prefill_chunk_size``) of an encoder-decoder's decoder prompt that keeps the source mask whole.

    transformers' ``GenerationMixin._prefill(input_ids, generation_config, model_kwargs, ...)`` (private;
    same signature and chunk loop in 5.17 and 5.24) feeds the prompt in chunks and cuts
    ``model_kwargs["attention_mask"]`` to the tokens fed so far, as a causal LM needs; for an
    encoder-decoder that is the source's mask, (B, S), which it cuts to the decoder prompt's length,
    while the decoder prompt's own ``decoder_attention_mask`` stays whole.  For the chunked prefill the
    two trade places, so that transformers cuts the decoder's mask; ``prepare_inputs_for_generation``
    hands each chunk's forward both masks under their own names.
    """

    def _prefill(self, input_ids, generation_config, model_kwargs: dict, *args, **kwargs):
        if generation_config.prefill_chunk_size is None:
            return super()._prefill(input_ids, generation_config, model_kwargs, *args, **kwargs)
        has_decoder_mask = "decoder_attention_mask" in model_kwargs
        model_kwargs[_SOURCE_MASK_WHILE_CHUNKED] = model_kwargs.pop("attention_mask", None)
        model_kwargs["attention_mask"] = model_kwargs.pop("decoder_attention_mask", None)
        outputs = super()._prefill(input_ids, generation_config, model_kwargs, *args, **kwargs)
        decoder_mask = model_kwargs.pop("attention_mask", None)
        if has_decoder_mask:
            model_kwargs["decoder_attention_mask"] = decoder_mask
        model_kwargs["attention_mask"] = model_kwargs.pop(_SOURCE_MASK_WHILE_CHUNKED)
        return outputs

    def prepare_inputs_for_generation(self, *args, **kwargs) -> dict:
        if _SOURCE_MASK_WHILE_CHUNKED in kwargs:
            kwargs["decoder_attention_mask"] = kwargs.pop("attention_mask", None)
            kwargs["attention_mask"] = kwargs.pop(_SOURCE_MASK_WHILE_CHUNKED)
        return super().prepare_inputs_for_generation(*args, **kwargs)


# The generate inputs of an encoder-decoder that are its source's: the encoder's outputs and the source mask.
_SOURCE_INPUTS = ("encoder_outputs", "attention_mask")


class SourceOncePerSentenceMixin:
    """``generate`` of an encoder-decoder that hands each source to the decoder once per sentence.

    transformers' ``GenerationMixin._expand_inputs_for_generation(expand_size, is_encoder_decoder, input_ids,
    **model_kwargs)`` (private; a static method in 5.17, a method in 5.24, the same keywords) repeats every
    input ``expand_size`` times per sentence (its beams, or its returned sequences), the encoder's outputs and
    the source mask included.  Here those two are left as they are: each source serves its ``expand_size``
    consecutive decoder rows, which the model's forward takes (rows = sources x n) and reads once
    (`talk_hf.layers.cross_attention.per_source`).  The decoder's own inputs are repeated as before.  Only
    for a model whose cross-attention cache is never reordered row by row: it holds nothing per row, or it
    is a `talk_hf.cache.ConvEncoderDecoderCache`, which reorders only its decoder half where a source serves
    several rows.  What ``generate(return_dict_in_generate=True, ...)`` returns keeps transformers' shapes:
    its ``encoder_hidden_states`` and ``encoder_attentions`` (tuples, which transformers does not repeat)
    hold a row per sentence, the decoder's outputs a row per beam.
    """

    def _expand_inputs_for_generation(
        self, expand_size: int = 1, is_encoder_decoder: bool = False, input_ids=None, **model_kwargs
    ):
        source = {name: model_kwargs.pop(name) for name in _SOURCE_INPUTS if name in model_kwargs}
        # With the source set aside there is nothing of an encoder's left to expand (transformers expands and
        # requires encoder_outputs exactly when is_encoder_decoder is set).
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size=expand_size, is_encoder_decoder=False, input_ids=input_ids, **model_kwargs
        )
        return input_ids, {**model_kwargs, **source}


class HeadClassKeepingResizeMixin:
    """Keep the LM head's class through ``resize_token_embeddings``.

    transformers builds a resized untied head in ``PreTrainedModel._get_resized_lm_head`` (internal;
    same signature in 5.17 and 5.23) as a plain ``nn.Linear`` (a tied head is resized through the
    embedding it shares and keeps its class).  When the old head is an ``nn.Linear``
    subclass that adds no state (the package's `talk_hf.layers.linear_layer.Linear`, which runs
    the decoding kernel), the new head gets the old one's class back, so it keeps its forward.
    """

    def _get_resized_lm_head(self, old_lm_head, *args, **kwargs):
        new_lm_head = super()._get_resized_lm_head(old_lm_head, *args, **kwargs)
        head_class = type(old_lm_head)
        # A subclass with its own __init__ may hold state that the rebuilt head lacks: leave it be.
        adds_no_state = issubclass(head_class, torch.nn.Linear) and head_class.__init__ is torch.nn.Linear.__init__
        keeps_class = head_class is not torch.nn.Linear and adds_no_state
        if keeps_class and type(new_lm_head) is torch.nn.Linear:
            new_lm_head.__class__ = head_class
        return new_lm_head


class UploadHookMixin:
    """Run ``before_upload`` on the folder that ``push_to_hub`` is about to upload.

    ``PushToHubMixin._upload_modified_files`` (internal; same signature in 5.17 to 5.24) is the upload step of
    both push routes (``push_to_hub`` and ``save_pretrained(..., push_to_hub=True)``), called once transformers
    has saved the checkpoint and written its model card (``create_and_tag_model_card``) into the folder.  A
    release that renames it leaves ``before_upload`` uncalled: the tests of what it does then fail.
    """

    def before_upload(self, folder: Path, repo_id: str, token) -> None:
        """What to change in ``folder`` before its files go to ``repo_id`` (``token``: push_to_hub's)."""

    def _upload_modified_files(self, working_dir, repo_id: str, files_timestamps: dict, **kwargs):
        self.before_upload(Path(working_dir), repo_id, kwargs.get("token"))
        return super()._upload_modified_files(working_dir, repo_id, files_timestamps, **kwargs)


class ModuleTiedWeightsMixin:
    """Declare weights tied by sharing one module in ``_tied_weights_keys`` without transformers tying them again.

    A model may tie two weights by making two attribute paths hold one module
    (``self.encoder.embed_tokens = self.decoder.embed_tokens``), so that FSDP2 finds the weight in one
    module only.  ``_tied_weights_keys`` ({target: source}) must still name such a pair:
    ``save_pretrained`` then writes the weight once, under the source's name
    (``modeling_utils._get_tied_weight_keys`` reads the attribute as it is).  But ``post_init`` and
    ``tie_weights`` also expand it (``PreTrainedModel.get_expanded_tied_weights_keys``, when
    ``tie_word_embeddings``) into the pairs that ``from_pretrained`` ties after loading, and a pair
    of one module goes wrong there for a model defined outside transformers:
    ``mark_tied_weights_as_initialized`` flags the target's parameter (the source's too: it is the
    same one) as loaded, drops every flagged key but the targets from the missing keys, and
    ``tie_weights`` then takes the source for loaded and drops the target as well.  A checkpoint
    without that weight would load without a word, the model keeping its random initialisation.
    One module needs no tying after loading: the pairs whose two names lead to the same module are
    left out of the expansion.  Same methods and behaviour in 5.17 to 5.24.
    """

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        expanded = super().get_expanded_tied_weights_keys(all_submodels=all_submodels)
        return {
            target: source
            for target, source in expanded.items()
            if self.get_submodule(_module_path(target)) is not self.get_submodule(_module_path(source))
        }


def _module_path(parameter_name: str) -> str:
    """``"encoder.embed_tokens.weight"`` -> ``"encoder.embed_tokens"`` (``""``: the model itself)."""
    return parameter_name.rpartition(".")[0]


def is_loaded_from_checkpoint(tensor: torch.Tensor) -> bool:
    """Whether ``from_pretrained`` filled ``tensor`` from a checkpoint, so that initialisation must
    leave it alone (transformers marks such tensors with ``_is_hf_initialized``)."""
    return getattr(tensor, "_is_hf_initialized", False)


def is_save_pretrained(frame: FrameType) -> bool:
    """Whether ``frame`` runs transformers' ``PreTrainedModel.save_pretrained``, however it was called
    (bound, through ``push_to_hub``, or unbound: ``PreTrainedModel.save_pretrained(model, folder)``).

    ``save_pretrained`` reads ``getattr(model, "hf_quantizer", None)`` (its refusal of models that
    transformers quantized and cannot save) before it creates the folder or writes anything; a model
    that must not be saved refuses there, when that read comes from this frame (`talk_hf.int8_model`).
    Checked against 5.24; the read has opened the method since the 4.x releases.
    """
    return frame.f_code is PreTrainedModel.save_pretrained.__code__


def is_push_to_hub(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs transformers' ``PushToHubMixin.push_to_hub`` (which ``PreTrainedModel.push_to_hub``
    calls), however it was called.  It creates the Hub repository and reads its model card, then calls
    ``save_pretrained`` (checked against 5.24)."""
    return frame is not None and frame.f_code is PushToHubMixin.push_to_hub.__code__
