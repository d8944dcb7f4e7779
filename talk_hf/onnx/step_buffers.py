"""The step graph's bindings and window buffers for one generation cache: `StepBuffers`.

A decoding step reads each layer's window from the cache and writes the new one, which the cache then
holds (`ExportedDecoder`).  `StepBuffers` writes the new windows into the buffers of the step before's
inputs, which the cache just let go: two sets of windows, each step reading one and writing the other,
with one `Binding` per direction.  So a step's windows are neither allocated nor rebound, and each
binding binds the source and positions once.

Like the PyTorch models' caches, whose windows are updated in place, a window tensor taken from the
cache is overwritten by a later step (here the step after next): clone it to keep it.
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

    def next_step(self, current: list[torch.Tensor]) -> tuple[Binding, list[torch.Tensor]]:
        """The binding for a step from the cache's ``current`` windows (each (B, history, C)) and the
        tensors it writes the new windows into.

        When ``current`` is not one of the two sets (the first step, or windows the cache received from
        elsewhere: a new batch, a reorder into new tensors), it becomes the first, and the second is
        allocated anew (no old buffer can then share memory with ``current``).
        """
        for reads in (0, 1):
            held = self.windows[reads]
            if held is not None and all(mine is theirs for mine, theirs in zip(held, current, strict=True)):
                break
        else:
            reads = 0
            self.windows = [list(current), [torch.empty(window.shape, dtype=torch.float32) for window in current]]
        return self.bindings[reads], self.windows[1 - reads]
