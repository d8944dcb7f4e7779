"""Checks of what a model's forward is given, each raising a ValueError that names the argument.

Without them, a wrong shape or dtype surfaces as a raw torch error from deep inside a layer ("The
size of tensor a (2) must match ...") or, for an out-of-range id on a GPU, as a device assert.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class InputNames:
    """What the caller called a stack's token ids and mask (e.g. ``decoder_input_ids``)."""

    ids: str = "input_ids"
    mask: str = "attention_mask"

    @property
    def embeds(self) -> str:
        return self.ids.replace("input_ids", "inputs_embeds")


def check_token_ids(name: str, input_ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a ValueError naming ``name`` when a token id is outside [0, vocab_size).

    Eager only: reading the range back is one host synchronisation, and under ``torch.compile`` a
    graph break, so compiled graphs skip it (an id out of range then fails in the embedding).
    """
    if input_ids.numel() == 0 or torch.compiler.is_compiling():
        return
    low, high = torch.stack(torch.aminmax(input_ids)).tolist()
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} must hold token ids in [0, {vocab_size}), got values from {low} to {high}")


def check_stack_inputs(
    names: InputNames, input_ids, inputs_embeds, attention_mask, past_length: int, d_model: int
) -> None:
    """Shapes and dtypes of one stack's inputs (the token-id range is `check_token_ids`'s job).

    ``generate()`` calls the forward too, so it gets these checks as well.

    Args:
        input_ids: (B, T) integer ids with B, T >= 1, or None when ``inputs_embeds`` (B, T, d_model) is given.
        attention_mask: (B, past_length + T) or None.
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
    if attention_mask.shape[1] != past_length + length:
        covered = f"the {past_length} cached and {length} new tokens" if past_length else f"the {length} tokens"
        raise ValueError(f"{names.mask} must cover {covered}, got length {attention_mask.shape[1]}")
