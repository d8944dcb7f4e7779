"""The definition of a token's document in a packed row (:mod:`.documents`) as direct loops, for the
ops' loop-form references (``*_naive``): walk from the token to the nearest document starts.
"""

import torch


def naive_document_span(position_ids, b: int, t: int, length: int) -> tuple[int, int]:
    """The first and last token of the document of token t in row b: from t back to the nearest token
    whose position is 0 (or the row's first), and forward to the token before the next such token
    (or the row's last).  Without ``position_ids`` (None), the whole row (0, T - 1)."""
    if position_ids is None:
        return 0, length - 1
    start = t
    while start > 0 and position_ids[b, start] != 0:
        start -= 1
    end = t
    while end + 1 < length and position_ids[b, end + 1] != 0:
        end += 1
    return start, end


def naive_reads_inside(position_ids, t: int, source: int, batch: int, length: int):
    """(B, 1) bool: whether token ``source`` lies in the document of token t, in each row (the rows
    of a convolution's tap of t that read x[source] rather than zero)."""
    spans = [naive_document_span(position_ids, b, t, length) for b in range(batch)]
    return torch.tensor([[first <= source <= last] for first, last in spans])
