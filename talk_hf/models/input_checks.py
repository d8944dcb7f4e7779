"""Checks of the tensors a model's forward is given, each raising an error that names the argument
(the keywords it is given through ``**kwargs`` are `keyword_checks`'s).

Without the checks, a wrong shape or dtype surfaces as a raw torch error from deep inside a layer
("The size of tensor a (2) must match ...") or, for an out-of-range id on a GPU, as a device assert,
and a wrong value (a mask of 2s, positions of packed rows) silently changes the outputs.  A stack runs
them all, each raising a ValueError, through `embedding_positions`.  An encoder-decoder's
``position_ids`` are checked against its own (`check_position_ids`); a causal LM's are honoured
(`packing.document_positions`).
"""

from dataclasses import dataclass

import torch
from torch import nn

from ..layers.sinusoidal_positions import positions_from_mask
from .keyword_checks import PACKING_UNSUPPORTED


@dataclass(frozen=True)
class InputNames:
    """What the caller called a stack's token ids and mask (e.g. ``decoder_input_ids``)."""

    ids: str = "input_ids"
    mask: str = "attention_mask"

    @property
    def embeds(self) -> str:
        return self.ids.replace("input_ids", "inputs_embeds")

    @property
    def positions(self) -> str:
        return self.ids.replace("input_ids", "position_ids")


def check_token_ids(name: str, input_ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a ValueError naming ``name`` when a token id is outside [0, vocab_size).

    Eager only: reading the range back is one host synchronisation, and under ``torch.compile`` a
    graph break, so compiled graphs skip it (an id out of range then fails in the embedding).
    """
    if input_ids.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = torch.aminmax(input_ids)
    low, high = int(low), int(high)
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} must hold token ids in [0, {vocab_size}), got values from {low} to {high}")


def check_mask_values(name: str, attention_mask: torch.Tensor | None) -> None:
    """Raise a ValueError naming ``name`` when the mask holds a value other than 0 and 1.

    The models read a mask as "real token or not", so a 2 or a 0.5 would change the outputs without a
    word.  bool masks need no check.  Eager only, as `check_token_ids` (one host synchronisation).
    """
    if attention_mask is None or attention_mask.dtype == torch.bool or torch.compiler.is_compiling():
        return
    if not torch.equal(attention_mask, attention_mask.bool().to(attention_mask.dtype)):  # 3 ops on the good path
        not_binary = (attention_mask != 0) & (attention_mask != 1)
        values = attention_mask[not_binary].unique()[:5].tolist()
        raise ValueError(
            f"{name} must hold only 0 (padding) and 1 (real token), as bool, integer or float, got {values}"
        )


def check_stack_inputs(
    names: InputNames, input_ids, inputs_embeds, attention_mask, past_length: int, d_model: int
) -> None:
    """Shapes and dtypes of one stack's inputs (the token-id range is `check_token_ids`'s job).

    ``generate()`` calls the forward too, so it gets these checks as well.

    Args:
        input_ids: (B, T) integer ids with B, T >= 1, or None when ``inputs_embeds`` (B, T, d_model) is given.
        attention_mask: (B, T) or (B, past_length + T), or None.
        past_length: tokens already in the cache (0 for an encoder).
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"pass exactly one of {names.ids} and {names.embeds}")
    if input_ids is not None:
        if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
            raise ValueError(f"{names.ids} must hold integer token ids (torch.long), got dtype {input_ids.dtype}")
        if input_ids.dim() != 2:
            raise ValueError(f"{names.ids} must have shape (batch, length), got {tuple(input_ids.shape)}")
        name, tokens = names.ids, input_ids
    else:
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != d_model:
            raise ValueError(
                f"{names.embeds} must have shape (batch, length, {d_model}), got {tuple(inputs_embeds.shape)}"
            )
        name, tokens = names.embeds, inputs_embeds
    batch, length = tokens.shape[:2]
    if batch == 0:
        raise ValueError(
            f"{name} must hold a batch of at least one row (one sequence), got shape {tuple(tokens.shape)}"
        )
    if length == 0:
        raise ValueError(f"{name} must hold at least one token, got shape {tuple(tokens.shape)}")
    if attention_mask is None:
        return
    if attention_mask.dim() != 2 or attention_mask.shape[0] != batch:
        raise ValueError(
            f"{names.mask} must have shape (batch, length) with the batch of {name} ({batch}), "
            f"got {tuple(attention_mask.shape)}"
        )
    if attention_mask.shape[1] not in (length, past_length + length):
        covered = f"the {length} new tokens, or the {past_length} cached and {length} new ones"
        raise ValueError(
            f"{names.mask} must cover {covered if past_length else f'the {length} tokens'}, got length {attention_mask.shape[1]}"
        )


def check_source_rows(encoder_hidden_states: torch.Tensor, rows: int, ids_name: str) -> None:
    """Raise a ValueError unless the (B, S, d) encoder output serves the decoder's ``rows`` as R = B x n
    consecutive rows per source (n = 1: a source per row; n > 1: the beams of one sentence, which read
    their source once: `layers.cross_attention.per_source`).  ``ids_name`` names the decoder's tokens."""
    sources = encoder_hidden_states.shape[0]
    if sources == 0 or rows % sources != 0:
        raise ValueError(
            f"the encoder's output has batch size {sources} but {ids_name} has {rows}: each source must serve "
            "one target row, or the same number n of consecutive rows (rows = sources x n, the beams of a source)"
        )


def check_source_mask(attention_mask: torch.Tensor | None, encoder_hidden_states: torch.Tensor) -> None:
    """Raise a ValueError unless the source's ``attention_mask`` is None or (B, S), the shape of the
    (B, S, d) encoder output that it masks in the cross-attention (which would broadcast a (B, 1) mask)."""
    source_shape = tuple(encoder_hidden_states.shape[:2])
    if attention_mask is not None and tuple(attention_mask.shape) != source_shape:
        raise ValueError(
            f"attention_mask (the source's) must have the shape (batch, source length) = {source_shape} of "
            f"encoder_outputs' last_hidden_state {tuple(encoder_hidden_states.shape)}, got {tuple(attention_mask.shape)}: "
            "pass the mask the encoder was run with"
        )


def check_position_ids_shape(name: str, position_ids, rows: str | int, batch: int, length: int, per: str) -> None:
    """Raise a ValueError unless ``position_ids`` are integers of shape (B, T), (1, T) or (T,).

    ``rows`` is how the dtype message names B (``"batch"`` or the number); ``per``, what each position
    belongs to (``"token"``, ``"new token"``).
    """
    floating = position_ids.dtype.is_floating_point or position_ids.dtype.is_complex
    if floating or position_ids.dtype == torch.bool or position_ids.dim() not in (1, 2):
        raise ValueError(
            f"{name} must be integer positions of shape ({rows}, {length}) or ({length},), got dtype "
            f"{position_ids.dtype} and shape {tuple(position_ids.shape)}"
        )
    if position_ids.shape[-1] != length or (position_ids.dim() == 2 and position_ids.shape[0] not in (1, batch)):
        raise ValueError(
            f"{name} must have one position per {per}, shape ({batch}, {length}), got {tuple(position_ids.shape)}"
        )


def check_position_ids(
    name: str,
    position_ids: torch.Tensor | None,
    expected: torch.Tensor,
    attention_mask: torch.Tensor | None,
    batch: int,
    length: int,
) -> None:
    """Accept ``position_ids`` that equal the positions the model counts itself; refuse any other.

    The model counts 0, 1, ... from each row's first real token (on from the cached ones); only real
    tokens are compared (a padded token's position is unused).

    Args:
        name: the argument's name (``position_ids`` or ``decoder_position_ids``).
        position_ids: (B, T), (1, T) or (T,) integer positions of the T new tokens, or None.
        expected: (B or 1, T) the positions the model counts.
        attention_mask: (B, T) or (B, past + T) with 1 at real tokens, or None (no padding).
        batch, length: B and T of the new tokens.

    Raises:
        ValueError: wrong shape or dtype; positions restarting inside a row (packed sequences, which an
            encoder-decoder does not compute); any other position that differs.  Inside a compiled graph the values are checked by an
            assertion of the graph itself (no host synchronisation; on CUDA a device-side assert).
    """
    if position_ids is None:
        return
    check_position_ids_shape(name, position_ids, "batch", batch, length, "new token")
    real = torch.ones_like(expected, dtype=torch.bool) if attention_mask is None else attention_mask[:, -length:].bool()
    wrong = (position_ids != expected) & real
    if torch.compiler.is_compiling():
        torch._assert_async(~wrong.any(), f"{name} differ from the positions the model counts from attention_mask")
        return
    if not wrong.any():
        return
    row, token = (index.item() for index in wrong.nonzero()[0])
    given = position_ids.expand_as(wrong)
    restarts = (given[:, 1:] <= given[:, :-1]) & real[:, 1:] & real[:, :-1]
    if restarts.any():
        row, token = (index.item() for index in restarts.nonzero()[0])
        raise ValueError(
            f"{name} restart inside row {row} (token {token + 1} has position {given[row, token + 1].item()} after "
            f"{given[row, token].item()}): {PACKING_UNSUPPORTED}"
        )
    raise ValueError(
        f"{name} must equal the positions the model counts itself (0, 1, ... from each row's first real token in "
        f"attention_mask, on from the cached tokens), or be left out: row {row}, token {token} has "
        f"{given[row, token].item()}, expected {expected.expand_as(wrong)[row, token].item()}"
    )


def embedding_positions(
    names: InputNames,
    embeddings: nn.Embedding,
    input_ids,
    inputs_embeds,
    attention_mask,
    cache,
    position_ids,
    document_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every check of one stack's inputs before it embeds them, then their positions, which ``cache``
    counts: shapes and dtypes, then (eager only) the values: token ids within ``embeddings``, a mask of 0
    and 1, ``position_ids`` equal to the model's own.

    Args:
        input_ids: (B, T) or None, inputs_embeds: (B, T, d) or None (exactly one of them).
        attention_mask: (B, T), or with a cache (B, past + T), or None; position_ids: (B, T), (1, T),
            (T,) or None, checked against the positions the model counts.
        cache: the decoder's `ConvCache` (positions go on from its counts, which then count the new
            tokens), or None.
        document_positions: (B, T) positions to take as they are (a causal LM's packed documents,
            `packing.document_positions`; already checked), instead of counting them; or None.

    Returns:
        (B, T) or (1, T) int64 positions of the new tokens.
    """
    tokens = input_ids if input_ids is not None else inputs_embeds
    length = None if tokens is None or tokens.dim() < 2 else tokens.shape[1]
    past_length = _cached_length(cache, attention_mask, length)
    check_stack_inputs(names, input_ids, inputs_embeds, attention_mask, past_length, embeddings.embedding_dim)
    if input_ids is not None:
        check_token_ids(names.ids, input_ids, embeddings.num_embeddings)
    check_mask_values(names.mask, attention_mask)
    batch = tokens.shape[0]
    if document_positions is not None:
        positions = document_positions
    elif cache is None:
        positions = positions_from_mask(attention_mask, length, 0, tokens.device)
    else:
        positions = cache.new_token_positions(attention_mask, length, tokens.device)
    check_position_ids(names.positions, position_ids, positions, attention_mask, batch, length)
    if cache is not None:
        cache.count_new_tokens(attention_mask, batch, length, tokens.device)
    return positions


def _cached_length(cache, attention_mask: torch.Tensor | None, length: int | None) -> int:
    """The cached tokens that ``attention_mask`` covers besides the ``length`` new ones: 0 for a mask of
    the new tokens only; a compiled step takes the mask's word for it (reading the cache's count there
    would synchronise with the device, and make the count an input of the graph)."""
    if cache is None or attention_mask is None or attention_mask.dim() != 2 or attention_mask.shape[1] == length:
        return 0
    if torch.compiler.is_compiling():
        return attention_mask.shape[1] - length
    return cache.get_seq_length()
