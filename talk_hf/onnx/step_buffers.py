"""The step graph's bindings and window buffers for one generation cache: `StepBuffers`.

A decoding step reads each layer's window from the cache and writes the new one, which the cache then
holds (`ExportedDecoder`).  `StepBuffers` writes the new windows into the buffers of the step before's
inputs, which the cache just let go: two sets of windows, each step reading one and writing the other,
with one `Binding` per direction.  So a step's windows are neither allocated nor rebound, and each
binding binds the source and positions once.  Beam search's reordering gathers the windows into the
other set as well (`StepBuffers.reorder`): one gather per window, no new tensor and no copy back.

Like the PyTorch models' caches, whose windows are updated in place, a window tensor taken from the
cache is overwritten by a later step (at the latest the step after next): clone it to keep it.
"""

from __future__ import annotations

import torch

from .bound_graph import Binding, BoundGraph


class StepBuffers:
    """One cache's two bindings of the step graph and the two sets of windows they alternate between.

    Args:
        graph: the step graph.
    """

    def __init__(self, graph: BoundGraph):
        self.bindings = (graph.new_binding(), graph.new_binding())
        self.windows: list[list[torch.Tensor] | None] = [None, None]  # the set binding i reads

    def _held(self, current: list[torch.Tensor]) -> int | None:
        """Which set ``current`` is (0 or 1), or None when it is neither."""
        for index, held in enumerate(self.windows):
            if held is not None and all(mine is theirs for mine, theirs in zip(held, current, strict=True)):
                return index
        return None

    def next_step(self, current: list[torch.Tensor]) -> tuple[Binding, list[torch.Tensor]]:
        """The binding for a step from the cache's ``current`` windows (each (B, history, C)) and the
        tensors it writes the new windows into.

        When ``current`` is not one of the two sets (the first step, or windows the cache received from
        elsewhere: a new batch, a reorder into new tensors), it becomes the first, and the second is
        allocated anew (no old buffer can then share memory with ``current``).
        """
        reads = self._held(current)
        if reads is None:
            reads = 0
            self.windows = [list(current), [torch.empty(window.shape, dtype=torch.float32) for window in current]]
        return self.bindings[reads], self.windows[1 - reads]

    def reorder(self, current: list[torch.Tensor], beam_idx: torch.Tensor) -> list[torch.Tensor] | None:
        """Beam search's reordering of the cache's ``current`` windows (each (B, history, C)), row i of each
        new window being row ``beam_idx[i]`` of the old: gathered into the other set (the one the last step
        read, not needed any more), which is returned for the cache to hold and the next step reads.
        None when ``current`` is neither set (the cache then reorders its windows itself).

        Args:
            beam_idx: (B,) int64 rows of ``current``, in [0, B) (torch's ``index_select`` refuses others).
        """
        held = self._held(current)
        if held is None:
            return None
        reordered = self.windows[1 - held]
        for window, target in zip(current, reordered, strict=True):
            torch.index_select(window, 0, beam_idx, out=target)
        return reordered
