"""Packed rows (several documents in one row, no padding): what a causal LM reads from the inputs of
transformers' ``DataCollatorWithFlattening`` and padding-free training.

The collator gives ``position_ids`` restarting at 0 at each document and, when asked,
flash-attention's ``cu_seq_lens_q/k`` and ``max_length_q/k`` or mamba's ``seq_idx``.  All of them say
the same thing: where each document starts.  `document_positions` turns whichever are given into one
(B, T) tensor, each token's position within its document, after checking that they agree.  Once per
forward the model derives `PackedDocuments` from them: it embeds the positions and hands their edges
(`talk_hf.ops.DocumentEdges`) to every mixer, whose windows then stop at the documents' edges, so a
packed document computes what it computes alone.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ..ops.documents import DocumentEdges, position_ids_from_cu_seqlens, position_ids_from_seq_idx
from .input_checks import check_position_ids_shape
from .keyword_checks import PACKING_ARGUMENTS

PACKED_WITH_A_CACHE = (
    "packed rows (documents restarting inside a row) are computed without a generation cache, whose fixed-size "
    "history would carry one document into the next: pass use_cache=False (training does)"
)


class PackedDocuments(NamedTuple):
    """What a causal LM derives from its packing inputs, once per forward.

    Attributes:
        positions: (B, T) int64, each token's position within its document (`document_positions`):
            embedded as they are, and read by the loss's masking (`mask_document_starts`).
        edges: their `DocumentEdges`, handed to every layer's mixer (the value check of the
            positions runs as they are derived).
        packed: whether a row holds several documents (a packing keyword, or positions restarting
            after a row's first real token).
    """

    positions: torch.Tensor
    edges: DocumentEdges
    packed: bool


def check_handed_documents(documents, kwargs: dict, batch: int, length: int) -> PackedDocuments:
    """Return the ``packed_documents`` a causal-LM head handed its base model, checked.

    Args:
        documents: what was passed as ``packed_documents``.
        kwargs: the base model's other keywords (none may describe the documents again).
        batch, length: B and T of the tokens.

    Raises:
        TypeError: not a `PackedDocuments`.
        ValueError: given with ``position_ids`` or a packing keyword, or derived for another shape.
    """
    if not isinstance(documents, PackedDocuments):
        raise TypeError(
            "packed_documents must be the talk_hf.models.packing.PackedDocuments a causal-LM head derived, got "
            f"{type(documents).__name__}: pass position_ids or the packing keywords instead"
        )
    described = [name for name in ("position_ids", *PACKING_ARGUMENTS) if kwargs.get(name) is not None]
    if described:
        raise ValueError(
            f"packed_documents were given with {', '.join(described)}: pass either the documents already derived "
            "or the inputs that describe them"
        )
    if documents.positions.shape != (batch, length):
        raise ValueError(
            f"packed_documents were derived for (B, T) = {tuple(documents.positions.shape)} but the tokens have "
            f"({batch}, {length})"
        )
    return documents


def document_positions(
    position_ids: torch.Tensor | None,
    packing: dict,
    batch: int,
    length: int,
    device: torch.device,
    name: str = "position_ids",
) -> torch.Tensor | None:
    """Each token's position within its document, from ``position_ids`` and the packing keywords.

    Args:
        position_ids: (B, T), (1, T) or (T,) integer positions (0 at each document's first token), or None.
        packing: the packing keywords given (`keyword_checks.PACKING_ARGUMENTS`): ``cu_seq_lens_q`` (D + 1,) cumulative
            document lengths over the one row of a (1, T) batch, ``cu_seq_lens_k`` (the same: the mixers
            read the tokens they write), ``max_length_q/k`` (int: the longest document), ``seq_idx``
            (B, T) each token's document index.
        batch, length: B and T of the tokens.
        name: what the caller calls ``position_ids`` (error messages).

    Returns:
        (B, T) int64 positions, or None when nothing describes the documents.  Their values are
        checked (>= 0) as their `DocumentEdges` are derived.

    Raises:
        ValueError: a malformed input (shape, dtype), forms that disagree, a ``max_length_*`` without
            ``cu_seq_lens_*`` or that is not the longest document.
    """
    described = []
    if position_ids is not None:
        described.append((name, _checked_position_ids(name, position_ids, batch, length, device)))
    cumulative = packing.get("cu_seq_lens_q")
    if packing.get("cu_seq_lens_k") is not None:
        if cumulative is None:
            raise ValueError("cu_seq_lens_k was given without cu_seq_lens_q: the mixers read the tokens they write")
        if not torch.equal(packing["cu_seq_lens_k"].cpu(), cumulative.cpu()):
            raise ValueError(
                "cu_seq_lens_k must equal cu_seq_lens_q (a causal LM's mixers read the documents they write), got "
                f"{packing['cu_seq_lens_k'].tolist()} and {cumulative.tolist()}"
            )
    if cumulative is not None:
        if batch != 1:
            raise ValueError(
                f"cu_seq_lens_q describes the documents of one packed row (a batch of shape (1, T)), got {batch} rows"
            )
        described.append(("cu_seq_lens_q", position_ids_from_cu_seqlens(cumulative, length).to(device)))
    _check_max_lengths(packing, cumulative)
    if packing.get("seq_idx") is not None:
        described.append(("seq_idx", _checked_seq_idx(packing["seq_idx"], batch, length, device)))
    if not described:
        return None
    (first_name, positions), *others = described
    for other_name, other in others:
        if not torch.equal(other, positions):
            row, token = (index.item() for index in (other != positions).nonzero()[0])
            raise ValueError(
                f"{other_name} and {first_name} describe different documents: row {row}, token {token} is at "
                f"position {other[row, token].item()} by {other_name} and {positions[row, token].item()} by {first_name}"
            )
    return positions


def _checked_position_ids(name: str, position_ids: torch.Tensor, batch: int, length: int, device) -> torch.Tensor:
    """(B, T) int64 from (B, T), (1, T) or (T,) ``position_ids``, their shape and device checked."""
    check_position_ids_shape(name, position_ids, batch, batch, length, "token")
    if position_ids.device != device:
        raise ValueError(f"{name} is on {position_ids.device} but the tokens are on {device}")
    return position_ids.long().expand(batch, length)


def _checked_seq_idx(seq_idx: torch.Tensor, batch: int, length: int, device) -> torch.Tensor:
    if not isinstance(seq_idx, torch.Tensor) or seq_idx.shape != (batch, length):
        shape = tuple(seq_idx.shape) if isinstance(seq_idx, torch.Tensor) else type(seq_idx).__name__
        raise ValueError(f"seq_idx must be a ({batch}, {length}) tensor of document indices, got {shape}")
    if seq_idx.device != device:
        raise ValueError(f"seq_idx is on {seq_idx.device} but the tokens are on {device}")
    return position_ids_from_seq_idx(seq_idx)


def _check_max_lengths(packing: dict, cumulative: torch.Tensor | None) -> None:
    """``max_length_q/k`` (flash-attention's) must come with ``cu_seq_lens_q`` and name its longest document."""
    for name in ("max_length_q", "max_length_k"):
        given = packing.get(name)
        if given is None:
            continue
        if cumulative is None:
            raise ValueError(f"{name} was given without cu_seq_lens_q, the documents it would describe")
        longest = int((cumulative[1:] - cumulative[:-1]).max())
        if int(given) != longest:
            raise ValueError(f"{name} must be the longest document's length, {longest} by cu_seq_lens_q, got {given}")


def restarts_inside_rows(positions: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """Whether a document starts after a row's first real token (a packed row), not just at it.

    Args:
        positions: (B, T) positions within documents; attention_mask: (B, T) or None.
    """
    starts = positions[:, 1:] == 0
    if attention_mask is not None:
        real = attention_mask[:, -positions.shape[1] :].bool()
        starts = starts & real[:, 1:] & real[:, :-1]
    return bool(starts.any())


def mask_document_starts(labels: torch.Tensor, positions: torch.Tensor, shifted: bool) -> torch.Tensor:
    """Labels that never ask the last token of a document for the first token of the next one.

    Args:
        labels: (B, T) targets with -100 = ignored: ``labels`` (the loss shifts them: logits t predict
            labels t + 1) or ``shift_labels`` (``shifted``: already aligned, logits t predict them at t).
        positions: (B, T) positions within documents.

    Returns:
        (B, T) labels with -100 where the target is a document's first token.
    """
    starts = positions == 0
    if shifted:
        starts = torch.cat([starts[:, 1:], torch.zeros_like(starts[:, :1])], dim=1)
    return labels.masked_fill(starts, -100)


def refuse_cores_without_documents(layers: nn.ModuleList) -> None:
    """Raise a ValueError when a layer's mixer core cannot honour document edges (a family whose
    core's forward takes no ``document_edges``, see `talk_hf.layers.mixer_block.MixerCore`)."""
    for layer in layers:
        if not layer.mixer.core_takes_document_edges:
            raise ValueError(
                f"packed rows (documents restarting inside a row) need mixers whose windows stop at the documents' "
                f"edges, and {type(layer.mixer.core).__name__}.forward takes no document_edges: pad the batch instead "
                "(DataCollatorWithPadding)"
            )
