"""Generation state of the convolutional decoders: a fixed-size history per layer.

A causal mixer step needs only the last ``history_size`` mixer inputs of its layer (TaLK: max_left;
DynamicConv/LightConv: K - 1).  `ConvHistoryLayer` keeps exactly those, zero-filled before the
sequence start (zeros give the same outputs as the start of the sequence: the ops are invariant
to zero padding), so memory and step cost do not grow with the generated length.

For encoder-decoder models `ConvEncoderDecoderCache` (an ``EncoderDecoderCache``) pairs a
`ConvCache` with a ``DynamicCache`` that holds the cross-attention keys/values of the encoder
output, computed once.

Every tensor of the state keeps its shape and storage through decoding (updated in place), and a
decoding step reads no Python number that changes from step to step: the token counts are tensors
too (`ConvCache.next_positions` per row, each layer's ``seen``), and ``generate`` gives a step only
its new tokens' mask column (``FixedStateGenerationMixin.create_masks_for_generate``).  So a decoding
step compiles to one graph of fixed shapes, which CUDA graphs can replay:
``generate(..., compile_config=CompileConfig(fullgraph=True))``.

Assisted and speculative decoding roll rejected draft tokens back with ``crop``: while recording
(``activate_past_recording``), a layer keeps the rows received since the last crop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .layers.sinusoidal_positions import positions_from_mask
from .transformers_internals import Cache, CacheLayerMixin, DynamicCache, FixedStateEncoderDecoderCache


class ConvHistoryLayer(CacheLayerMixin):
    """The state of one decoder layer: the last ``history_size`` mixer inputs and the count of tokens seen.

    ``seen`` () int64 counts the tokens received (padding included), on the window's device, added to
    in place; ``has_past`` says whether it is above 0 without reading it (a step's graph branches on
    that bool, never on the count).  ``get_seq_length()`` reads the count (a host synchronisation:
    transformers asks for it outside the decoding steps).

    ``window`` (B, history_size, C) holds the inputs, oldest first.  It is allocated once, on the
    first update, and then only written in place (``copy_``): its shape and storage stay the same
    through decoding and beam reordering, so a decoding step compiles to one graph
    (``torch.compile(fullgraph=True)``) whose state input keeps its address (CUDA graphs).  Only
    ``batch_repeat_interleave`` / ``batch_select_indices`` (a new batch size) and
    ``offload``/``prefetch`` (a new device) allocate a new window.

    After ``activate_past_recording()`` (assisted and speculative decoding) the layer also keeps
    ``recorded`` (B, history_size + R, C): the window at the last ``crop``, then the R rows received
    since, so that drafted tokens the verifier rejected can be rolled back exactly; ``crop``
    restores the window from it and starts it again from the (fixed-size) window.
    """

    is_compileable = True
    is_croppable = True

    def __init__(self, history_size: int):
        super().__init__()
        self.history_size = history_size
        self.window: torch.Tensor | None = None
        self.recorded: torch.Tensor | None = None
        self.seen: torch.Tensor | None = None
        self.has_past = False
        self.record_past = False

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(history_size={self.history_size}, seen_tokens={self.get_seq_length()})"

    @property
    def history(self) -> torch.Tensor | None:
        """(B, history_size, C): the mixer inputs a causal step of the next token needs (the window)."""
        return self.window

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        """Allocate a zero window for the batch size, width, dtype and device of ``key_states`` (B, T, C)."""
        batch, _, channels = key_states.shape
        self._set_window(key_states.new_zeros(batch, self.history_size, channels))
        self.seen = _static(torch.zeros((), dtype=torch.long, device=key_states.device))
        if self.record_past:
            self.recorded = self.window.clone()
        self.device = key_states.device
        self.is_initialized = True

    def _set_window(self, window: torch.Tensor) -> None:
        """Hold ``window`` (B, history_size, C) from now on, its address fixed for compiled steps."""
        self.window = _static(window)

    def activate_past_recording(self) -> None:
        """Keep each update's rows until the next ``crop`` (transformers calls this for assisted decoding)."""
        self.record_past = True
        if self.is_initialized:
            self.recorded = self.window.clone()

    def extend(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """Record new mixer inputs (the window is updated in place) and return them behind the
        history that preceded them.

        Args:
            inputs: (B, T, C) this layer's mixer inputs for T new tokens (zero at padding).

        Returns:
            (B, history_size + T, C) in ``inputs``' dtype: the history_size mixer inputs just before
            ``inputs`` (zeros before the start), then ``inputs``: the context a causal step over the
            T new tokens reads.  None where no token came before ``inputs`` (a prompt, or a forward
            without a past): the history is all zeros then, so the caller's causal step without a
            cache computes the same, without the context's copy and extra rows.
        """
        fresh = not self.has_past  # a new, reset or fully cropped layer: its window is zeros
        if not self.is_initialized:
            self.lazy_initialization(inputs)
        stored = inputs if inputs.dtype == self.window.dtype else inputs.to(self.window.dtype)
        context = torch.cat([self.window, stored], dim=1)
        if self.record_past:
            self.recorded = torch.cat([self.recorded, stored], dim=1)
        self.window.copy_(context[:, context.shape[1] - self.history_size :])
        self.seen.add_(inputs.shape[1])
        self.has_past = True
        if fresh:
            return None
        return context if context.dtype == inputs.dtype else context.to(inputs.dtype)

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("ConvHistoryLayer keeps mixer inputs, not keys/values: call extend(inputs)")

    def get_seq_length(self) -> int:
        return int(self.seen) if self.has_past else 0

    def get_max_length(self) -> int:
        return -1  # the state is fixed-size: any length can be generated

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def reset(self) -> None:
        if self.is_initialized:
            self.window.zero_()
            self.seen.zero_()
            if self.record_past:
                self.recorded = self.window.clone()
        self.has_past = False

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` tokens (transformers' convention: a count <= 0) and
        start recording again from the window.

        Only rows recorded since ``activate_past_recording()`` and the last ``crop`` can be removed:
        older ones have left the fixed-size window.
        """
        if tokens_to_remove > 0:
            raise ValueError(
                f"crop takes minus the number of tokens to remove (transformers' convention), got {tokens_to_remove}"
            )
        removed = -tokens_to_remove
        recorded = 0 if self.recorded is None else self.recorded.shape[1] - self.history_size
        if removed > recorded:
            raise ValueError(
                f"cannot remove {removed} tokens from a ConvCache layer that recorded {recorded} since its last crop "
                "(a fixed-size history keeps only the rows recorded since activate_past_recording() and the last crop)"
            )
        if removed > 0:
            kept = self.recorded.shape[1] - removed
            self.window.copy_(self.recorded[:, kept - self.history_size : kept])
            self.seen.sub_(removed)
            self.has_past = self.get_seq_length() > 0
        if self.recorded is not None:
            self.recorded = self.window.clone()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i of the new state is row ``beam_idx[i]`` of the old one (in place)."""
        if self.is_initialized:
            beam_idx = beam_idx.to(self.window.device)
            self.window.copy_(self.window.index_select(0, beam_idx))
            if self.recorded is not None:
                self.recorded = self.recorded.index_select(0, beam_idx)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._set_window(self.window.repeat_interleave(repeats, dim=0))
            if self.recorded is not None:
                self.recorded = self.recorded.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._set_window(self.window[indices])
            if self.recorded is not None:
                self.recorded = self.recorded[indices]

    def offload(self) -> None:
        if self.is_initialized:
            self.window = self.window.to("cpu", non_blocking=True)
            self.seen = self.seen.to("cpu", non_blocking=True)
            if self.recorded is not None:
                self.recorded = self.recorded.to("cpu", non_blocking=True)

    def prefetch(self) -> None:
        if self.is_initialized and self.window.device != self.device:
            self._set_window(self.window.to(self.device, non_blocking=True))
            self.seen = _static(self.seen.to(self.device, non_blocking=True))
            if self.recorded is not None:
                self.recorded = self.recorded.to(self.device, non_blocking=True)


class ConvCache(Cache):
    """One `ConvHistoryLayer` per decoder layer, and each row's count of real tokens.

    ``next_positions`` (B,) int64 counts, per row, the real (unpadded) tokens seen: the position of
    the row's next token.  With it a step's positions need only the new tokens' mask (B, T), not the
    mask of every token so far, whose length grows step by step (`new_token_positions`).  Like the
    windows it is allocated once and then updated in place, beam reordering included.

    Args:
        history_sizes: per decoder layer, the number of past mixer inputs its causal step needs.
    """

    def __init__(self, history_sizes: list[int]):
        super().__init__(layers=[ConvHistoryLayer(size) for size in history_sizes])
        self.next_positions: torch.Tensor | None = None

    @classmethod
    def from_state(cls, windows: Sequence[torch.Tensor], next_positions: torch.Tensor) -> ConvCache:
        """A cache that continues decoding from given state tensors, as an exported decoding step
        receives them (`talk_hf.export.traced_forward`): the state the step's forward updates.

        Args:
            windows: per layer, (B, history_size, C) the last mixer inputs, oldest first; each
                layer holds a copy (its updates in place leave the given tensor as it was).
            next_positions: (B,) int64, each row's real tokens so far (the next token's position).

        Every layer counts one token seen (``seen``: the windows hold a past, whose length they do not
        say), so a step continues the windows; ``get_seq_length`` then reads 1.
        """
        cache = cls([window.shape[1] for window in windows])
        for layer, window in zip(cache.layers, windows, strict=True):
            layer.lazy_initialization(window)
            layer.window.copy_(window)
            layer.seen.fill_(1)
            layer.has_past = True
        cache.next_positions = _static(next_positions.clone())
        return cache

    @property
    def nbytes(self) -> int:
        """Bytes held by the histories (constant during generation; larger between a recorded chunk and
        its ``crop`` in assisted decoding)."""
        return sum(
            layer.window.nbytes + (0 if layer.recorded is None else layer.recorded.nbytes)
            for layer in self.layers
            if layer.is_initialized
        )

    @property
    def rows(self) -> int | None:
        """B, the batch rows of the state (a shape, not a host read), or None before the first update."""
        return next((layer.window.shape[0] for layer in self.layers if layer.is_initialized), None)

    @property
    def has_past(self) -> bool:
        """Whether a token came before: a forward then continues the windows (no Python count is read)."""
        return any(layer.has_past for layer in self.layers)

    def new_token_positions(self, attention_mask: torch.Tensor | None, length: int, device) -> torch.Tensor:
        """Positions of the T = ``length`` new tokens, counted from each row's first real token.

        Args:
            attention_mask: 1 at real tokens: (B, T), the new tokens' only (positions go on from
                ``next_positions``), or (B, past + T), every token's (positions counted over it); or
                None (no padding).

        Returns:
            (B, T) int64, or (1, T) without a mask on a fresh cache; padding gets its row's count
            before it, minus one (clamped at 0), as `positions_from_mask` gives it.
        """
        if attention_mask is not None and attention_mask.shape[1] != length:
            return positions_from_mask(attention_mask, length, 0, device)
        if attention_mask is None:
            steps = torch.arange(length, device=device).unsqueeze(0)
        else:  # a one-column running count is the column itself (a decoding step: no cumsum to trace)
            real = attention_mask.long()
            steps = (real if length == 1 else real.cumsum(-1)) - 1
        if self.next_positions is not None:
            steps = steps + self.next_positions.unsqueeze(1)
        return steps.clamp(min=0)

    def count_new_tokens(self, attention_mask: torch.Tensor | None, batch: int, length: int, device) -> None:
        """Add the new tokens' real ones to ``next_positions`` (after `new_token_positions` read it).

        Args:
            attention_mask: as for `new_token_positions`; batch, length: B and T of the new tokens.
        """
        if attention_mask is not None and attention_mask.shape[1] != length:
            real_so_far = attention_mask.long().sum(-1)
            if self.next_positions is None:
                self.next_positions = _static(real_so_far)
            else:
                self.next_positions.copy_(real_so_far)
            return
        if self.next_positions is None:
            self.next_positions = _static(torch.zeros(batch, dtype=torch.long, device=device))
        self.next_positions.add_(length if attention_mask is None else attention_mask.long().sum(-1))

    def reset(self) -> None:
        super().reset()
        if self.next_positions is not None:
            self.next_positions.zero_()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self.reorder_positions(beam_idx)

    def reorder_positions(self, beam_idx: torch.LongTensor) -> None:
        """Beam search's reordering of the token counts alone (row i becomes row ``beam_idx[i]``), for a
        caller that reorders the layers' windows itself (`talk_hf.onnx.exported_decoder`)."""
        if self.next_positions is not None:
            self.next_positions.copy_(self.next_positions.index_select(0, beam_idx.to(self.next_positions.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.next_positions is not None:
            self.next_positions = _static(self.next_positions.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.next_positions is not None:
            self.next_positions = _static(self.next_positions[indices])

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` tokens (see `ConvHistoryLayer.crop`); they were real
        tokens in every row (assisted decoding drafts whole tokens)."""
        super().crop(tokens_to_remove)
        if self.next_positions is not None and tokens_to_remove < 0:
            self.next_positions.sub_(-tokens_to_remove)


def _static(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, marked as keeping its address through compiled steps (CUDA graphs read it in place)."""
    if not torch.compiler.is_compiling():
        torch._dynamo.mark_static_address(tensor)
    return tensor


class ConvEncoderDecoderCache(FixedStateEncoderDecoderCache):
    """``EncoderDecoderCache(ConvCache(history_sizes), DynamicCache())`` for the seq2seq models.

    The batch operations and ``crop`` act on the `ConvCache` row by row / history by history; ``crop``
    leaves the cross-attention keys and values of the source alone.

    In ``generate`` the cross-attention half holds one row per source, serving the n consecutive decoder
    rows of its sentence (its beams or returned sequences: rows = sources x n,
    `talk_hf.transformers_internals.SourceOncePerSentenceMixin`).  Then ``reorder_cache`` reorders the
    decoder half only, and ``batch_select_indices`` refuses (see each); ``batch_repeat_interleave``
    repeats both halves, which keeps each decoder row reading its source.  Whether a source serves several
    rows is read from the two halves' shapes, not from their values: no host read per step.
    """

    decoder_cache_class = ConvCache

    def __init__(self, history_sizes: list[int]):
        super().__init__(ConvCache(history_sizes), DynamicCache())

    @classmethod
    def from_state(
        cls,
        windows: Sequence[torch.Tensor],
        next_positions: torch.Tensor,
        cross_keys_values: Sequence[tuple[torch.Tensor, torch.Tensor]] = (),
    ) -> ConvEncoderDecoderCache:
        """`ConvCache.from_state` of ``windows`` and ``next_positions``, with the cross-attention keys
        and values of the source already computed: ``cross_keys_values[i]`` (each (B, heads, S,
        head_dim)) for decoder layer i (none: a decoder that reads the encoder output itself)."""
        cache = cls([window.shape[1] for window in windows])
        cache.self_attention_cache = ConvCache.from_state(windows, next_positions)
        for layer_idx, (keys, values) in enumerate(cross_keys_values):
            cache.cross_attention_cache.update(keys, values, layer_idx)
            cache.is_updated[layer_idx] = True
        return cache

    def rows_per_source(self) -> int:
        """n, the decoder rows that each source's cross-attention keys and values serve (rows = sources x n);
        1 while either half is empty (nothing to tell apart)."""
        decoder_rows = self.self_attention_cache.rows
        cross = self.cross_attention_cache
        if decoder_rows is None or not cross.layers or cross.get_seq_length(0) == 0:
            return 1
        return decoder_rows // cross.layers[0].keys.shape[0]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: decoder row i becomes row ``beam_idx[i]`` (B x beams,) of before.

        Where each source serves several rows, only the decoder half is reordered: transformers' beam
        search keeps every beam in its sentence's block of rows (``beam_idx`` maps a block onto itself:
        each of its indices is a beam of the same sentence plus that sentence's offset), so each row still
        reads its own source, and the source's keys and values need no gather, step after step.
        """
        if self.rows_per_source() > 1:
            self.self_attention_cache.reorder_cache(beam_idx)
        else:
            super().reorder_cache(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the decoder rows ``indices`` (contrastive search); refused where each source serves several
        rows: the sources that the kept rows read could not be told from the cache alone."""
        rows_per_source = self.rows_per_source()
        if rows_per_source > 1:
            raise ValueError(
                f"batch_select_indices cannot select rows of a cache whose cross-attention keys and values hold one "
                f"row per source for its {rows_per_source} consecutive decoder rows (generate's beams or "
                "returned sequences of one sentence share its source): the source inputs (encoder_outputs, "
                "attention_mask) would no longer match the rows"
            )
        super().batch_select_indices(indices)
