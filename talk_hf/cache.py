"""Generation state of the convolutional decoders: a fixed-size window per layer.

A causal mixer step needs only the last ``window`` mixer inputs of its layer (TaLK: max_left;
DynamicConv/LightConv: K - 1).  `ConvWindowLayer` keeps exactly those, zero-filled before the
sequence start (zeros give the same outputs as the start of the sequence: the ops are invariant
to zero padding), so memory and step cost do not grow with the generated length.

For encoder-decoder models `ConvEncoderDecoderCache` (an ``EncoderDecoderCache``) pairs a
`ConvCache` with a ``DynamicCache`` that holds the cross-attention keys/values of the encoder
output, computed once.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicCache, EncoderDecoderCache


class ConvWindowLayer(CacheLayerMixin):
    """The state of one decoder layer: ``window`` (B, window_size, C) and the count of tokens seen."""

    def __init__(self, window_size: int):
        super().__init__()
        self.window_size = window_size
        self.window: torch.Tensor | None = None
        self.seen_tokens = 0

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(window_size={self.window_size}, seen_tokens={self.seen_tokens})"

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        """Allocate a zero window for the batch size, width, dtype and device of ``key_states`` (B, T, C)."""
        batch, _, channels = key_states.shape
        self.window = key_states.new_zeros(batch, self.window_size, channels)
        self.device = key_states.device
        self.is_initialized = True

    def update_window(self, inputs: torch.Tensor) -> torch.Tensor:
        """Record new mixer inputs and return the window that preceded them.

        Args:
            inputs: (B, T, C) this layer's mixer inputs for T new tokens (zero at padding).

        Returns:
            (B, window_size, C): the mixer inputs just before ``inputs`` (zeros before the start).
        """
        if not self.is_initialized:
            self.lazy_initialization(inputs)
        past = self.window
        context = torch.cat([past, inputs.to(past.dtype)], dim=1)
        self.window = context[:, context.shape[1] - self.window_size:].clone()
        self.seen_tokens += inputs.shape[1]
        return past

    def update(self, key_states, value_states, *args, **kwargs):
        raise NotImplementedError("ConvWindowLayer keeps mixer inputs, not keys/values: call update_window(inputs)")

    def get_seq_length(self) -> int:
        return self.seen_tokens

    def get_max_length(self) -> int:
        return -1  # the state is fixed-size: any length can be generated

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.seen_tokens + query_length, 0

    def reset(self) -> None:
        if self.is_initialized:
            self.window.zero_()
        self.seen_tokens = 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row i of the new state is row ``beam_idx[i]`` of the old one."""
        if self.is_initialized:
            self.window = self.window.index_select(0, beam_idx.to(self.window.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self.window = self.window.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.window = self.window[indices]

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError(
            "a ConvCache keeps a fixed window of the past and cannot be rolled back (crop), so it does not "
            "support assisted or speculative decoding"
        )

    def offload(self) -> None:
        if self.is_initialized:
            self.window = self.window.to("cpu", non_blocking=True)

    def prefetch(self) -> None:
        if self.is_initialized and self.window.device != self.device:
            self.window = self.window.to(self.device, non_blocking=True)


class ConvCache(Cache):
    """One `ConvWindowLayer` per decoder layer.

    Args:
        window_sizes: per decoder layer, the number of past mixer inputs its causal step needs.
    """

    def __init__(self, window_sizes: list[int]):
        super().__init__(layers=[ConvWindowLayer(size) for size in window_sizes])

    @property
    def nbytes(self) -> int:
        """Bytes held by the windows (constant during generation)."""
        return sum(layer.window.nbytes for layer in self.layers if layer.is_initialized)


class ConvEncoderDecoderCache(EncoderDecoderCache):
    """``EncoderDecoderCache(ConvCache(window_sizes), DynamicCache())`` for the seq2seq models.

    transformers' batch operations of an ``EncoderDecoderCache`` accept only ``DynamicCache``
    parts; a `ConvCache` supports them too (repeat and select rows), so they are allowed here.
    """

    def __init__(self, window_sizes: list[int]):
        super().__init__(ConvCache(window_sizes), DynamicCache())

    def check_dynamic_cache(self, method: str) -> None:
        if not isinstance(self.self_attention_cache, ConvCache):
            super().check_dynamic_cache(method)

    def crop(self, tokens_to_remove: int) -> None:
        self.self_attention_cache.crop(tokens_to_remove)  # raises: a fixed window cannot be rolled back
