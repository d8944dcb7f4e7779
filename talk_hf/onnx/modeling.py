"""Exported models as transformers models: `ORTModelForCausalLM` and `ORTModelForSeq2SeqLM`.

``from_pretrained(folder)`` reads a folder that ``python -m talk_hf.export`` wrote (its config.json,
generation_config.json, manifest and graphs, as ONNX Runtime CPU sessions) and gives a model that
transformers' ``generate`` drives as it drives the PyTorch model: every strategy and logits processor
(greedy, sampling, beam search, beam sampling, repetition penalties, n-gram blocking, forced and
suppressed tokens, length limits) runs in transformers' own code, in torch, and only the forward runs
in ONNX Runtime, so the tokens equal the PyTorch model's for the same settings and seed.  The causal
LMs work in ``pipeline("text-generation")``.

The generation cache is the package's own (`ConvCache`; `ConvEncoderDecoderCache` for an
encoder-decoder, whose cross-attention half stays empty: a step reads the encoder's outputs, which
``generate`` gives it once per sentence, `SourceOncePerSentenceMixin`), its windows the graphs' outputs (`ExportedDecoder`).  What the
graphs cannot do is refused naming the argument: embeddings in place of ids, labels (no loss), attention
weights or hidden states, assisted decoding, ``compile_config``, an encoder-decoder's ``guidance_scale``.
The logits of more than the last token (``logits_to_keep`` other than 1) take one step graph call per token.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast, Seq2SeqLMOutput

from ..cache import ConvCache, ConvEncoderDecoderCache
from ..export.runner import OnnxGenerator
from ..models.input_checks import InputNames
from ..models.keyword_checks import refuse_unknown_arguments
from ..transformers_internals import (
    CACHE_NAME,
    EncoderDecoderChunkedPrefillMixin,
    FixedStateGenerationMixin,
    SourceOncePerSentenceMixin,
    can_return_tuple,
    resolve_cache_argument,
    split_cache,
)
from .encoder import ORTEncoder
from .exported_decoder import ExportedDecoder
from .exported_folder import exported_file_names, file_states, read_folder
from .hub import HubOptions, check_loading_keywords, resolve_folder
from .inputs import SourceInputs, new_tokens, refuse_unsupported
from .outputs import model_output
from .saving import ExportedFolderHubMixin

DECODER_NAMES = InputNames("decoder_input_ids", "decoder_attention_mask")  # an encoder-decoder's decoder inputs


class ORTModelBase(ExportedFolderHubMixin, FixedStateGenerationMixin, PreTrainedModel, GenerationMixin):
    """What both heads share: loading a folder (local or from the Hub), saving and uploading it
    (`saving.ExportedFolderHubMixin`), the cache, the refusals, the CPU and float32 it runs in."""

    main_input_name = "input_ids"
    base_model_prefix = "model"  # no such attribute: the model is its own base model
    is_encoder_decoder_class: bool
    cache_class: type[ConvCache] | type[ConvEncoderDecoderCache]  # the generation cache it fills

    def __init__(self, config, generation_config: GenerationConfig, generator: OnnxGenerator):
        super().__init__(config)
        super().train(False)  # inference only: the graphs hold no dropout
        self.generation_config = generation_config
        self.folder = generator.folder
        self.loaded_files = file_states(self.folder, exported_file_names(self.folder))  # save_pretrained's check
        self.exported = ExportedDecoder(generator)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | Path,
        threads: int | None = None,
        optimization: str = "all",
        spin: bool = False,
        *,
        revision: str | None = None,
        token: str | bool | None = None,
        cache_dir: str | Path | None = None,
        local_files_only: bool = False,
        force_download: bool = False,
        subfolder: str = "",
        **kwargs,
    ):
        """The model exported into a folder (by ``python -m talk_hf.export`` / `talk_hf.export.export_onnx`),
        local or uploaded to the Hugging Face Hub (``push_to_hub``).

        Args:
            pretrained_model_name_or_path: the exported folder's path (a `Path` is always one), or a Hub
                repository id (``"user/talk-de-en-onnx"``) that is no existing path: its exported folder's files
                are downloaded into the Hub cache, or found there offline (`hub.resolve_folder`).
            threads, optimization, spin: ONNX Runtime's intra-op threads (None: one per core), graph
                optimisation level and idle spinning, as for `talk_hf.export.OnnxGenerator`.
            revision, token, cache_dir, local_files_only, force_download: as for ``huggingface_hub.snapshot_download``.
            subfolder: the exported folder's path inside the repository (or the local folder).
            kwargs: ``dtype`` / ``torch_dtype`` (float32 or "auto"), ``device_map`` ("cpu") and optimum's ``provider``
                ("CPUExecutionProvider") only; every other
                keyword of ``PreTrainedModel.from_pretrained`` is refused by name (`hub.check_loading_keywords`).

        Raises:
            FileNotFoundError: no manifest, graph, config.json or generation_config.json in the folder; a Hub
                repository that is not there, not cached offline, or holds no exported folder (`hub.resolve_folder`).
            ValueError: a damaged folder (`talk_hf.export.read_manifest`), a model of the other kind (a
                causal LM's folder given to the encoder-decoder class, or the reverse), a config.json that
                does not load, of another model type than the manifest's, or of other vocabulary sizes than
                the graphs' (its field and both sizes named); a ``dtype`` or ``device_map`` it cannot run in.
            TypeError: a keyword of ``PreTrainedModel.from_pretrained`` that means nothing here.
        """
        check_loading_keywords(cls.__name__, kwargs)
        hub = HubOptions(revision, token, cache_dir, local_files_only, force_download, subfolder)
        folder = resolve_folder(pretrained_model_name_or_path, hub)
        options = {"threads": threads, "optimization": optimization, "spin": spin}
        config, generation_config, generator = read_folder(folder, cls.is_encoder_decoder_class, **options)
        return cls(config, generation_config, generator)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def to(self, *args, **kwargs):
        """The model itself for the CPU and float32 (what it runs in); any other device or dtype is refused."""
        for target in (*args, *kwargs.values()):
            if isinstance(target, bool) or (isinstance(target, torch.dtype) and target == torch.float32):
                continue
            if isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu":
                continue
            raise ValueError(
                f"{type(self).__name__} runs in ONNX Runtime on the CPU in float32 (the dtype of its graphs): it cannot "
                f"move or cast to {target!r}; for int8, quantize the exported folder (python -m talk_hf.export ... --int8)"
            )
        return self

    def _apply(self, fn, recurse: bool = True):
        raise ValueError(
            f"{type(self).__name__} runs in ONNX Runtime on the CPU in float32 (the dtypes of its graphs): cuda(), "
            "half(), bfloat16() or double() cannot move or cast it"
        )

    def cpu(self):
        return self

    def float(self):
        return self

    def num_parameters(self, *args, **kwargs) -> int:
        raise ValueError(
            f"{type(self).__name__} holds its weights in ONNX Runtime's sessions, not as torch parameters: "
            "count them on the PyTorch model (num_parameters()), or read the sizes of the folder's .onnx files"
        )

    def get_memory_footprint(self, *args, **kwargs) -> int:
        raise ValueError(
            f"{type(self).__name__} holds its weights in ONNX Runtime's sessions, not as torch parameters or buffers: "
            "their memory is the sessions' (about the size of the folder's .onnx files, more while decoding)"
        )

    def train(self, mode: bool = True):
        if mode:
            raise ValueError(
                f"{type(self).__name__} is for inference: its graphs cannot be trained (train the PyTorch model)"
            )
        return super().train(False)

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, *args, **kwargs):
        """Refuse, before the first decoding step, what the graphs cannot do; then the cache
        (`FixedStateGenerationMixin`)."""
        generation_mode = kwargs.get("generation_mode", args[0] if args else None)
        if generation_mode == "assisted_generation":
            raise ValueError(
                f"{type(self).__name__} cannot verify drafted tokens (assistant_model, prompt_lookup_num_tokens): its "
                "graphs give the logits of one token per row; generate without them"
            )
        if generation_config.compile_config is not None:
            raise ValueError(
                f"{type(self).__name__} runs compiled graphs already (ONNX Runtime): generate without compile_config"
            )
        refuse_unsupported(
            "generate()",
            inputs_embeds=model_kwargs.get("inputs_embeds"),
            decoder_inputs_embeds=model_kwargs.get("decoder_inputs_embeds"),
            output_attentions=generation_config.output_attentions,
            output_hidden_states=generation_config.output_hidden_states,
        )
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def _cache(self, cache, past_key_values, use_cache):
        """The cache this forward fills: the given one (checked), or a new one (also with ``use_cache=False``,
        for the forward alone)."""
        cache = resolve_cache_argument(cache, past_key_values)
        if cache is None:
            return self.new_cache()
        if use_cache is False:
            raise ValueError("use_cache=False with a generation cache: pass one or the other")
        if not isinstance(cache, self.cache_class):
            raise TypeError(
                f"the generation cache (`cache`, or `past_key_values` before transformers 5.24) must be the "
                f"{self.cache_class.__name__} that {type(self).__name__} returned, got {type(cache).__name__}"
            )
        return cache

    def _reorder_cache(self, cache, beam_idx: torch.Tensor):
        """Beam search's reordering of the generation cache (row i becomes row ``beam_idx[i]``), called by
        ``generate`` in place of ``cache.reorder_cache`` (5.17 to 5.24): the windows are gathered into the
        step graph's bound buffers (`ExportedDecoder.reorder`); the cross-attention half, empty, reorders itself."""
        conv_cache, cross_cache = split_cache(cache)
        self.exported.reorder(conv_cache, beam_idx)
        if cross_cache is not None:
            cross_cache.reorder_cache(beam_idx)
        return cache

    def new_cache(self) -> ConvCache | ConvEncoderDecoderCache:
        return self.cache_class(self.exported.new_cache_sizes())

    def _decode(self, names: InputNames, ids, mask, cache, logits_to_keep, source: dict) -> torch.Tensor:
        """Check the new tokens (B, T) and their mask (B, T) or (B, past + T) (`inputs.new_tokens`) and
        decode them; the (B, K, V) logits of each row's last K = ``logits_to_keep`` tokens (0: every
        token's), as the PyTorch model's forward gives them.  Every token's (K != 1, T > 1: a forward
        outside ``generate``, or classifier-free guidance's unconditional one) takes one step graph
        call per token."""
        conv_cache = split_cache(cache)[0]
        covers_past = mask is not None and mask.dim() == 2 and ids is not None and mask.shape[1] != ids.shape[-1]
        past = conv_cache.get_seq_length() if covers_past else 0
        ids, token_mask = new_tokens(names, ids, mask, past, self.exported.vocab_size, logits_to_keep)
        every_position = logits_to_keep != 1 and ids.shape[1] > 1
        logits = self.exported(ids, token_mask, conv_cache, source, every_position)
        return logits[:, -logits_to_keep:] if every_position else logits


class ORTModelForCausalLM(ORTModelBase):
    """An exported causal LM (TaLK, DynamicConv, LightConv or a registered family's), run by ONNX Runtime.

    ``ORTModelForCausalLM.from_pretrained(folder)``; then ``generate`` as with the PyTorch model, or
    ``pipeline("text-generation", model=model, tokenizer=tokenizer)``.
    """

    is_encoder_decoder_class = False
    cache_class = ConvCache

    @can_return_tuple
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
        """input_ids (B, T), attention_mask (B, T) or (B, past + T) with 1 at real tokens (left padding
        allowed), the cache (``cache``, or ``past_key_values`` before transformers 5.24) -> logits (B, K, V)
        of each row's last K = ``logits_to_keep`` tokens (0: all), and the cache moved on (None with ``use_cache=False``)."""
        refuse_unknown_arguments(self, kwargs)
        refuse_unsupported(
            f"{type(self).__name__}.forward()",
            inputs_embeds=inputs_embeds,
            labels=labels,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        cache = self._cache(cache, past_key_values, use_cache)
        logits = self._decode(InputNames(), input_ids, attention_mask, cache, logits_to_keep, {})
        return model_output(
            CausalLMOutputWithPast, logits=logits, **{CACHE_NAME: None if use_cache is False else cache}
        )


class ORTModelForSeq2SeqLM(SourceOncePerSentenceMixin, EncoderDecoderChunkedPrefillMixin, ORTModelBase):
    """An exported encoder-decoder (TaLK, DynamicConv, LightConv, SliceNet or a registered family's), run
    by ONNX Runtime: ``ORTModelForSeq2SeqLM.from_pretrained(folder)``, then ``generate`` as with the
    PyTorch model.  ``get_encoder()`` (`ORTEncoder`) runs the encoder graph."""

    is_encoder_decoder_class = True
    cache_class = ConvEncoderDecoderCache

    def __init__(self, config, generation_config: GenerationConfig, generator: OnnxGenerator):
        super().__init__(config, generation_config, generator)
        self.encoder = ORTEncoder(generator, config.vocab_size)
        self.source_inputs = SourceInputs(self.exported.source_names)

    def get_encoder(self, *args, **kwargs) -> ORTEncoder:
        return self.encoder

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
        labels=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        logits_to_keep: int = 0,
        past_key_values=None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Source (B, S) ids and mask (or the ``encoder_outputs`` of `get_encoder`), the decoder's new (B, T)
        ids and their mask, the cache -> logits (B, K, V) of each row's last K = ``logits_to_keep`` tokens (0:
        all), and the cache moved on."""
        # generate's chunked prefill leaves position_ids=None (a causal LM's name, unused here) among the inputs
        given = {name: value for name, value in kwargs.items() if not (name == "position_ids" and value is None)}
        refuse_unknown_arguments(self, given)
        refuse_unsupported(
            f"{type(self).__name__}.forward()",
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            labels=labels,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask=attention_mask)
        elif input_ids is not None:
            raise ValueError("pass input_ids (the source) or its encoder_outputs, not both")
        cache = self._cache(cache, past_key_values, use_cache)
        rows = None if decoder_input_ids is None else decoder_input_ids.shape[0]
        source = self.source_inputs(encoder_outputs, attention_mask, rows)
        logits = self._decode(DECODER_NAMES, decoder_input_ids, decoder_attention_mask, cache, logits_to_keep, source)
        return model_output(
            Seq2SeqLMOutput,
            logits=logits,
            **{CACHE_NAME: None if use_cache is False else cache},
            encoder_last_hidden_state=encoder_outputs.get("last_hidden_state"),
        )
