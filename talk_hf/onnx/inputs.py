"""Checks of what an exported model's forward is given, each error naming the argument.

The graphs take token ids and give the logits of each row's last token with the new generation state:
`refuse_unsupported` refuses what they cannot honour, `new_tokens` checks the decoder's new tokens (the
checks of the PyTorch models, `talk_hf.models.input_checks`), `source_inputs` picks what a decoding
step of an encoder-decoder reads of the source from the encoder's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..export.traced_forward import ENCODER_OUTPUT, SOURCE_MASK
from ..models.input_checks import InputNames, check_mask_values, check_stack_inputs, check_token_ids

# What a forward or generate() may be given that the exported graphs cannot honour, and why.
UNSUPPORTED = {
    "inputs_embeds": "the graphs embed token ids themselves: pass input_ids",
    "decoder_inputs_embeds": "the graphs embed token ids themselves: pass decoder_input_ids",
    "labels": "the graphs compute no loss: compute it with the PyTorch model",
    "output_attentions": "the graphs return logits and the generation state only",
    "output_hidden_states": "the graphs return logits and the generation state only",
}


def refuse_unsupported(where: str, **given) -> None:
    """A ValueError naming each argument of ``given`` (names of `UNSUPPORTED`) that is set (not None or False)."""
    named = [
        f"{name} ({UNSUPPORTED[name]})" for name, value in given.items() if value is not None and value is not False
    ]
    if named:
        raise ValueError(f"{where} got {'; '.join(named)}: an exported model cannot honour it")


def new_tokens(
    names: InputNames, ids, mask, past_length: int, vocab_size: int, logits_to_keep
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's new tokens, checked: (B, T) int64 ids and their (B, T) int64 mask (1 at real tokens).

    Args:
        names: what the caller called the ids and the mask (``decoder_input_ids`` ...).
        ids: (B, T) ids in [0, vocab_size); mask: (B, T) or (B, past_length + T) of 0 and 1, or None.
        logits_to_keep: 1, or 0 (every position's) for one token per row: the graphs give the last token's.
    """
    if ids is None:
        raise ValueError(f"pass {names.ids} (B, T): an exported model takes token ids")
    check_stack_inputs(names, ids, None, mask, past_length, 0)
    check_token_ids(names.ids, ids, vocab_size)
    check_mask_values(names.mask, mask)
    keeps_last = isinstance(logits_to_keep, int) and (
        logits_to_keep == 1 or (logits_to_keep == 0 and ids.shape[1] == 1)
    )
    if not keeps_last:
        raise ValueError(
            f"logits_to_keep={logits_to_keep!r} with {ids.shape[1]} new tokens: the exported graphs give the logits of "
            "each row's last token only; pass logits_to_keep=1 (generate does; assisted decoding is not supported)"
        )
    token_mask = torch.ones_like(ids) if mask is None else mask[:, mask.shape[1] - ids.shape[1] :]
    return ids.long(), token_mask.long()


def source_inputs(encoder_outputs, attention_mask, rows: int | None, names: list[str]) -> dict[str, torch.Tensor]:
    """What a decoding step reads of the source, by the step graph's input ``names``.

    Args:
        encoder_outputs: what the exported model's ``get_encoder()`` returned (`ORTEncoder`).
        attention_mask: the source's (B, S) mask, 1 at real tokens, or None (no padding).
        rows: the decoder's batch (the source's must equal it), or None when unknown.
    """
    if not isinstance(encoder_outputs, Mapping) or "last_hidden_state" not in encoder_outputs:
        raise ValueError(
            "encoder_outputs must be what this model's get_encoder() returns (a BaseModelOutput holding the "
            f"encoder graph's outputs), got {type(encoder_outputs).__name__}"
        )
    hidden = encoder_outputs["last_hidden_state"]
    if attention_mask is None:
        attention_mask = torch.ones(hidden.shape[:2], dtype=torch.long)
    elif tuple(attention_mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but the source {tuple(hidden.shape[:2])}"
        )
    check_mask_values("attention_mask", attention_mask)
    named = {**encoder_outputs, ENCODER_OUTPUT: hidden, SOURCE_MASK: attention_mask.long()}
    missing = [name for name in names if name not in named]
    if missing:
        raise ValueError(
            f"encoder_outputs lacks {missing}, which the decoding step reads: pass what this model's get_encoder() "
            "returns (the PyTorch model's encoder gives only its last_hidden_state)"
        )
    if rows is not None and hidden.shape[0] != rows:
        raise ValueError(f"the source has {hidden.shape[0]} rows but decoder_input_ids {rows}")
    return {name: named[name] for name in names}
