"""Checks of what an exported model's forward is given, each error naming the argument.

The graphs take token ids and give the logits of each row's last token with the new generation state:
`refuse_unsupported` refuses what they cannot honour, `new_tokens` checks the decoder's new tokens (the
checks of the PyTorch models, `talk_hf.models.input_checks`), `SourceInputs` picks what a decoding
step of an encoder-decoder reads of the source from the encoder's outputs (checking a source once).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch

from ..export.traced_forward import ENCODER_OUTPUT, SOURCE_MASK
from ..models.input_checks import InputNames, check_mask_values, check_source_rows, check_stack_inputs, check_token_ids

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
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The decoder's new tokens, checked: (B, T) int64 ids and their (B, T) int64 mask (1 at real tokens),
    or None without a mask (every token real).

    Args:
        names: what the caller called the ids and the mask (``decoder_input_ids`` ...).
        ids: (B, T) ids in [0, vocab_size); mask: (B, T) or (B, past_length + T) of 0 and 1, or None.
        logits_to_keep: how many of the last positions' logits to give (0: every position's), an int >= 0.
    """
    if ids is None:
        raise ValueError(f"pass {names.ids} (B, T): an exported model takes token ids")
    check_stack_inputs(names, ids, None, mask, past_length, 0)
    check_token_ids(names.ids, ids, vocab_size)
    check_mask_values(names.mask, mask)
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
        raise ValueError(
            f"logits_to_keep must be an int >= 0 (how many of the last positions' logits; 0: every position's), got "
            f"{logits_to_keep!r}: the exported graphs cannot keep the logits of chosen positions"
        )
    token_mask = None if mask is None else mask[:, mask.shape[1] - ids.shape[1] :].long()
    return ids.long(), token_mask


class SourceInputs:
    """What a decoding step of an encoder-decoder reads of the source, by the step graph's input ``names``.

    ``generate`` passes the same source mask at every step: its checks and its int64 form are kept for
    the next call, which takes them while it gets the same mask tensor, of the same shape, for a source
    of the same shape, not written in place since (torch's version counter; an inference tensor has
    none, so a mask made under ``torch.inference_mode`` has its values checked at every call).  Only a
    weak reference to the given mask is kept.

    Args:
        names: the step graph's inputs of the source (``ExportedDecoder.source_names``).
    """

    def __init__(self, names: list[str]):
        self.names = names
        self.output_names = [name for name in names if name not in (ENCODER_OUTPUT, SOURCE_MASK)]
        self._mask = _CheckedMask(None, torch.Size(), torch.ones(0, 0, dtype=torch.long))

    def __call__(self, encoder_outputs, attention_mask, rows: int | None) -> dict[str, torch.Tensor]:
        """The step inputs of the source by name, each with one row per source.

        Args:
            encoder_outputs: what the exported model's ``get_encoder()`` returned (`ORTEncoder`).
            attention_mask: the source's (B, S) mask, 1 at real tokens, or None (no padding).
            rows: the decoder's batch R, or None when unknown: each source serves R / B consecutive
                decoder rows (`check_source_rows`: one, or the beams of its sentence, which the step
                graph reads it once for).
        """
        if not isinstance(encoder_outputs, Mapping) or "last_hidden_state" not in encoder_outputs:
            raise ValueError(
                "encoder_outputs must be what this model's get_encoder() returns (a BaseModelOutput holding the "
                f"encoder graph's outputs), got {type(encoder_outputs).__name__}"
            )
        hidden = encoder_outputs.get("last_hidden_state")
        given = [encoder_outputs.get(name) for name in self.output_names]
        if not isinstance(hidden, torch.Tensor):
            raise ValueError(
                f"encoder_outputs' last_hidden_state must be a (B, S, d) torch.Tensor, got {type(hidden).__name__}"
            )
        mask = self._mask.int64(attention_mask, hidden.shape)
        if mask is None:
            mask = self._check_mask(attention_mask, hidden.shape)
            self._mask = _CheckedMask(attention_mask, hidden.shape, mask)
        missing = [name for name, value in zip(self.output_names, given, strict=True) if value is None]
        if missing:
            raise ValueError(
                f"encoder_outputs lacks {missing}, which the decoding step reads: pass what this model's get_encoder() "
                "returns (the PyTorch model's encoder gives only its last_hidden_state)"
            )
        wrong = {
            name: type(value).__name__
            for name, value in zip(self.output_names, given, strict=True)
            if not isinstance(value, torch.Tensor)
        }
        if wrong:
            raise ValueError(f"encoder_outputs must hold torch.Tensor values (what get_encoder() returns), got {wrong}")
        if rows is not None:
            check_source_rows(hidden, rows, "decoder_input_ids")
        named = {ENCODER_OUTPUT: hidden, SOURCE_MASK: mask, **dict(zip(self.output_names, given, strict=True))}
        return {name: named[name] for name in self.names}

    @staticmethod
    def _check_mask(attention_mask, source_shape: torch.Size) -> torch.Tensor:
        """The (B, S) int64 mask of a source of the (B, S, d) ``source_shape``: ``attention_mask`` checked, or
        all ones for None."""
        if attention_mask is None:
            return torch.ones(source_shape[:2], dtype=torch.long)
        if not isinstance(attention_mask, torch.Tensor):
            raise ValueError(f"attention_mask must be a (B, S) torch.Tensor, got {type(attention_mask).__name__}")
        if tuple(attention_mask.shape) != tuple(source_shape[:2]):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)} but the source {tuple(source_shape[:2])}"
            )
        check_mask_values("attention_mask", attention_mask)
        return attention_mask.long()


class _CheckedMask:
    """A source mask that passed `SourceInputs._check_mask` (a weak reference to it, None for no mask), for
    a source of ``source_shape``, with its int64 form and what its values were checked at: the mask's
    shape and version counter."""

    def __init__(self, given: torch.Tensor | None, source_shape: torch.Size, mask: torch.Tensor):
        self.given = None if given is None else weakref.ref(given)
        self.source_shape, self.mask = source_shape, mask
        self.state = None if given is None else _state(given)

    def int64(self, given, source_shape: torch.Size) -> torch.Tensor | None:
        """The int64 form of ``given`` for a source of ``source_shape`` if it is the mask checked, unchanged
        since; else None."""
        if source_shape != self.source_shape:
            return None
        if given is None:
            return self.mask if self.given is None else None
        if self.given is None or self.given() is not given or self.state is None or _state(given) != self.state:
            return None
        return self.mask


def _state(tensor: torch.Tensor) -> tuple | None:
    """What a tensor's checked values depend on besides its identity: its shape and version counter,
    which every in-place write moves on; None for an inference tensor, which has no version counter."""
    return None if tensor.is_inference() else (tensor.shape, tensor._version)
