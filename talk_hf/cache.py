"""Generation state of the convolutional decoders: a fixed-size history per layer.

A causal mixer step needs only the last ``history_size`` mixer inputs of its layer (TaLK: max_left;
DynamicConv/LightConv: K - 1).  `ConvHistoryLayer` keeps exactly those, zero-filled before the
sequence start (zeros give the same outputs as the start of the sequence: the ops are invariant
to zero padding), so memory and step cost do not grow with the generated length.

For encoder-decoder models `ConvEncoderDecoderCache` (an ``EncoderDecoderCache``) pairs a
`ConvCache` with a ``DynamicCache`` that holds the cross-attention keys/values of the encoder
output, computed once.

Assisted and speculative decoding roll rejected draft tokens back with ``crop``: while recording
(``activate_past_recording``), a layer keeps the rows of the chunk it last verified until then.
"""

from __future__ import annotations

import torch

from .transformers_internals import Cache, CacheLayerMixin, DynamicCache, FixedStateEncoderDecoderCache


class ConvHistoryLayer(CacheLayerMixin):
    """The state of one decoder layer: the last ``history_size`` mixer inputs and the count of tokens seen.

    ``context`` (B, history_size [+ recorded rows], C) holds the inputs, oldest first.  Normally it
    is cut back to ``history_size`` rows after every update.  After ``activate_past_recording()``
    (assisted and speculative decoding) the rows of each new chunk are kept until the next
    ``crop``, so that drafted tokens the verifier rejected can be rolled back exactly; ``crop`` then
    cuts the context back to ``history_size`` rows, and the state stays fixed-size.
    """

    is_croppable = True

    def __init__(self, history_size: int):
        super().__init__()
        self.history_size = history_size
        self.context: torch.Tensor | None = None
        self.seen_tokens = 0
        self.record_past = False

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(history_size={self.history_size}, seen_tokens={self.seen_tokens})"

    @property
    def history(self) -> torch.Tensor | None:
        """(B, history_size, C): the mixer inputs a causal step of the next token needs."""
        if self.context is None:
            return None
        return self.context[:, self.context.shape[1] - self.history_size :]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        """Allocate a zero history for the batch size, width, dtype and device of ``key_states`` (B, T, C)."""
        batch, _, channels = key_states.shape
        self.context = key_states.new_zeros(batch, self.history_size, channels)
        self.device = key_states.device
        self.is_initialized = True

    def activate_past_recording(self) -> None:
        """Keep each update's rows until the next ``crop`` (transformers calls this for assisted decoding)."""
        self.record_past = True

    def extend(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """Record new mixer inputs and return them behind the history that preceded them.

        Args:
            inputs: (B, T, C) this layer's mixer inputs for T new tokens (zero at padding).

        Returns:
            (B, history_size + T, C) in ``inputs``' dtype: the history_size mixer inputs just before
            ``inputs`` (zeros before the start), then ``inputs``: the context a causal step over the
            T new tokens reads.  None where no token came before ``inputs`` (a prompt, or a forward
            without a past): the history is all zeros then, so the caller's causal step without a
            cache computes the same, without the context's copy and extra rows.
        """
        fresh = self.seen_tokens == 0  # a new, reset or fully cropped layer: its history is zeros
        if not self.is_initialized:
            self.lazy_initialization(inputs)
        stored = inputs if inputs.dtype == self.context.dtype else inputs.to(self.context.dtype)
        recorded = torch.cat([self.context, stored], dim=1)  # [recorded rows,] the history, the new rows
        context = recorded[:, recorded.shape[1] - self.history_size - inputs.shape[1] :]
        if self.record_past:
            self.context = recorded
        else:
            # A view of the last rows; a chunk longer than the history is copied out, so that its
            # storage (a long prompt's) is freed.
            self.context = recorded[:, recorded.shape[1] - self.history_size :]
            if inputs.shape[1] > self.history_size:
                self.context = self.context.clone()
        self.seen_tokens += inputs.shape[1]
        if fresh:
            return None
        return context if context.dtype == inputs.dtype else context.to(inputs.dtype)

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("ConvHistoryLayer keeps mixer inputs, not keys/values: call extend(inputs)")

    def get_seq_length(self) -> int:
        return self.seen_tokens

    def get_max_length(self) -> int:
        return -1  # the state is fixed-size: any length can be generated

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen_tokens + query_length, 0

    def reset(self) -> None:
        if self.is_initialized:
            self.context = self.history.clone().zero_()
        self.seen_tokens = 0

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` tokens (transformers' convention: a count <= 0) and
        cut the recorded context back to ``history_size`` rows.

        Only rows recorded since ``activate_past_recording()`` and the last ``crop`` can be removed:
        older ones have left the fixed-size history.
        """
        if tokens_to_remove > 0:
            raise ValueError(
                f"crop takes minus the number of tokens to remove (transformers' convention), got {tokens_to_remove}"
            )
        removed = -tokens_to_remove
        if removed == 0 or not self.is_initialized:
            if self.is_initialized:
                self.context = self.history
            return
        recorded = self.context.shape[1] - self.history_size
        if removed > recorded:
            raise ValueError(
                f"cannot remove {removed} tokens from a ConvCache layer that recorded {recorded} since its last crop "
                "(a fixed-size history keeps only the rows recorded since activate_past_recording() and the last crop)"
            )
        self.context = self.context[:, recorded - removed : self.context.shape[1] - removed]
        self.seen_tokens -= removed

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i of the new state is row ``beam_idx[i]`` of the old one."""
        if self.is_initialized:
            self.context = self.context.index_select(0, beam_idx.to(self.context.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.context = self.context.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.context = self.context[indices]

    def offload(self) -> None:
        if self.is_initialized:
            self.context = self.context.to("cpu", non_blocking=True)

    def prefetch(self) -> None:
        if self.is_initialized and self.context.device != self.device:
            self.context = self.context.to(self.device, non_blocking=True)


class ConvCache(Cache):
    """One `ConvHistoryLayer` per decoder layer.

    Args:
        history_sizes: per decoder layer, the number of past mixer inputs its causal step needs.
    """

    def __init__(self, history_sizes: list[int]):
        super().__init__(layers=[ConvHistoryLayer(size) for size in history_sizes])

    @property
    def nbytes(self) -> int:
        """Bytes held by the histories (constant during generation; larger between a recorded chunk and
        its ``crop`` in assisted decoding)."""
        return sum(layer.context.nbytes for layer in self.layers if layer.is_initialized)


class ConvEncoderDecoderCache(FixedStateEncoderDecoderCache):
    """``EncoderDecoderCache(ConvCache(history_sizes), DynamicCache())`` for the seq2seq models.

    The batch operations and ``crop`` act on the `ConvCache` row by row / history by history; ``crop``
    leaves the cross-attention keys and values of the source alone.
    """

    decoder_cache_class = ConvCache

    def __init__(self, history_sizes: list[int]):
        super().__init__(ConvCache(history_sizes), DynamicCache())
