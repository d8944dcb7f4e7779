"""Packed sequences: where each token's document starts and ends.

transformers' ``DataCollatorWithFlattening`` packs several documents into one row, with
``position_ids`` restarting at 0 at each.  A document starts at every token whose position is 0, and
at the row's first token; the other values are not read (transformers' left padding fills the pads'
positions with 1, which is then harmless).  A window or tap never reaches past its token's document,
so a packed document computes what it computes alone.

* :class:`DocumentEdges` — what every op's ``document_edges=`` takes: the per-token edges derived
  from ``position_ids`` (checked) with cumulative max/min (no Python loop, no host sync: it traces
  under ``torch.compile(fullgraph=True)``).  A model derives them once per forward and hands them to
  every layer; they hold their own tensor, so a later change to ``position_ids`` does not reach
  them (derive them again from the changed positions);
* :func:`taps_inside_documents` — which convolution taps read inside their token's document;
* :func:`position_ids_from_cu_seqlens`, :func:`position_ids_from_seq_idx` — the other two forms of
  packing (flash-attention's cumulative lengths, mamba's document index) as ``position_ids``.

Value checks (negative positions, cumulative lengths out of order) cost one host sync each; they
run in eager calls and are skipped while ``torch.compile`` traces or a CUDA graph captures.
Loop-form definition of the edges, for the tests' references: :mod:`.documents_naive`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._validation import check_int, runs_value_checks

INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


class DocumentEdges:
    """The first and last token of each token's document in a batch of packed rows.

    ``DocumentEdges(position_ids)`` derives them from (B, T) integer ``position_ids``, each token's
    position in its document (>= 0; a document starts at every 0 and at the row's first token), and
    checks them: a TypeError or ValueError names what is wrong (the values' check, a host sync, runs
    in eager calls: `runs_value_checks`).  The ops take nothing else as ``document_edges=``, so their
    kernels only ever read edges that lie inside their rows.

    Attributes:
        tensor: (B, T, 2) int32 on position_ids' device, derived once: ``[..., 0]`` the last u <= t
            with position 0 (else 0), ``[..., 1]`` the first u > t with position 0, minus 1 (else
            T - 1).  The ops read it as it is: do not write into it.
    """

    __slots__ = ("_tensor",)

    def __init__(self, position_ids: torch.Tensor):
        _check_position_ids(position_ids)
        _require(position_ids >= 0, "position_ids must be >= 0 (each token's position in its document)")
        self._tensor = _derive_edges(position_ids)

    @property
    def tensor(self) -> torch.Tensor:
        return self._tensor

    def __repr__(self) -> str:
        return f"DocumentEdges(shape={tuple(self._tensor.shape)}, device={self._tensor.device})"


def checked_edges(document_edges: DocumentEdges | None, x: torch.Tensor) -> torch.Tensor | None:
    """The (B, T, 2) int32 edges of an op's ``document_edges=`` argument, or None without them.

    Args:
        document_edges: a `DocumentEdges` of x's batch and length, on x's device, or None.
        x: the op's (B, T, C) input.

    Raises:
        TypeError: ``document_edges`` is not a `DocumentEdges` (a tensor of edges included: only
            derived edges are taken, which lie inside their rows).
        ValueError: they were derived for another batch, length or device.
    """
    if document_edges is None:
        return None
    if not isinstance(document_edges, DocumentEdges):
        raise TypeError(
            "document_edges must be a talk_hf.ops.DocumentEdges or None, got "
            f"{type(document_edges).__name__}: derive it from the (B, T) position_ids once per batch, "
            "document_edges=DocumentEdges(position_ids), and pass it to every op of the batch"
        )
    edges = document_edges.tensor
    if edges.shape[:2] != x.shape[:2]:
        raise ValueError(
            f"document_edges were derived for (B, T) = {tuple(edges.shape[:2])} but x has (B, T) = "
            f"{tuple(x.shape[:2])} (its first two dims): derive them from this batch's position_ids"
        )
    if edges.device != x.device:
        raise ValueError(
            f"document_edges are on {edges.device} but x is on {x.device}: derive them from position_ids on x's device"
        )
    return edges


def _derive_edges(position_ids: torch.Tensor) -> torch.Tensor:
    """`DocumentEdges.tensor` of checked (B, T) ``position_ids``."""
    length = position_ids.shape[1]
    time = torch.arange(length, device=position_ids.device)
    starts_here = (position_ids == 0) | (time == 0)
    # A token ends a document where the next one starts one; the row's last token too, since its
    # first starts one (the roll wraps it around).
    ends_here = starts_here.roll(-1, dims=1)
    start = torch.where(starts_here, time, 0).cummax(1).values
    end = torch.where(ends_here, time, length).flip(1).cummin(1).values.flip(1)
    return torch.stack([start, end], dim=-1).to(torch.int32)


def taps_inside_documents(edges: torch.Tensor, taps: int, left: int, dilation: int = 1) -> torch.Tensor:
    """Whether tap k of token t, reading token ``t + k * dilation - left``, reads inside t's document.

    Args:
        edges: (B, T, 2) document edges (`DocumentEdges.tensor`).

    Returns:
        (B, T, K) bool.
    """
    length = edges.shape[1]
    time = torch.arange(length, device=edges.device).unsqueeze(1)
    source = time + torch.arange(taps, device=edges.device) * dilation - left  # (T, K)
    return (source >= edges[..., :1]) & (source <= edges[..., 1:])


def _check_position_ids(position_ids) -> None:
    """Require a (B, T) integer tensor (its values are checked by `DocumentEdges`)."""
    if not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"position_ids must be a torch.Tensor of shape (B, T), got {type(position_ids).__name__}")
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must have shape (B, T) (2 dims), got shape {tuple(position_ids.shape)}")
    _check_integer("position_ids", position_ids)


def position_ids_from_cu_seqlens(cu_seqlens: torch.Tensor, total_length: int) -> torch.Tensor:
    """``position_ids`` of one packed row from flash-attention's cumulative document lengths.

    Args:
        cu_seqlens: (n_docs + 1,) integer tensor: 0, then the running total of the documents' lengths,
            ending at ``total_length`` (transformers' ``cu_seq_lens_q``); non-decreasing (an empty
            document is allowed and has no token).
        total_length: N, the row's length.

    Returns:
        (1, N) int64 on cu_seqlens's device: each token's position in its document.
    """
    check_int("total_length", total_length, 0)
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        described = tuple(cu_seqlens.shape) if isinstance(cu_seqlens, torch.Tensor) else type(cu_seqlens).__name__
        raise ValueError(f"cu_seqlens must be a 1-dim tensor (n_docs + 1,) of cumulative lengths, got {described}")
    _check_integer("cu_seqlens", cu_seqlens)
    cu_seqlens = cu_seqlens.long()
    _require(cu_seqlens[0] == 0, "cu_seqlens must start at 0")
    _require(cu_seqlens.diff() >= 0, "cu_seqlens must be non-decreasing (cumulative document lengths)")
    _require(cu_seqlens[-1] == total_length, f"cu_seqlens must end at the row's length total_length={total_length}")
    tokens = torch.arange(total_length, device=cu_seqlens.device)
    document = torch.searchsorted(cu_seqlens, tokens, right=True) - 1
    return (tokens - cu_seqlens[document]).unsqueeze(0)


def position_ids_from_seq_idx(seq_idx: torch.Tensor) -> torch.Tensor:
    """``position_ids`` from mamba's document index: a document starts where ``seq_idx`` changes.

    Args:
        seq_idx: (B, T) integer tensor, the index of each token's document in its row.

    Returns:
        (B, T) int64 on seq_idx's device.
    """
    if not isinstance(seq_idx, torch.Tensor) or seq_idx.dim() != 2:
        described = tuple(seq_idx.shape) if isinstance(seq_idx, torch.Tensor) else type(seq_idx).__name__
        raise ValueError(f"seq_idx must be a (B, T) tensor of document indices, got {described}")
    _check_integer("seq_idx", seq_idx)
    time = torch.arange(seq_idx.shape[1], device=seq_idx.device)
    starts_here = F.pad(seq_idx[:, 1:] != seq_idx[:, :-1], (1, 0), value=True)
    return time - torch.where(starts_here, time, 0).cummax(1).values


def _check_integer(name: str, value: torch.Tensor) -> None:
    if value.dtype not in INTEGER_DTYPES:
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")


def _require(valid: torch.Tensor, message: str) -> None:
    """Raise ``ValueError(message)`` unless every element of ``valid`` is true; where value checks
    run (a host sync: `runs_value_checks`)."""
    if runs_value_checks(valid) and not bool(valid.all()):
        raise ValueError(message)
