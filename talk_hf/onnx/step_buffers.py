"""The step graph's bindings and window buffers for one generation cache: `StepBuffers`.

A decoding step reads each layer's window from the cache and writes the new one, which the cache then
holds (`ExportedDecoder`).  `StepBuffers` writes the new windows into the buffers of the step before's
inputs, which the cache just let go: two sets of windows, each step reading one and writing the other,
with one `Binding` per direction.  So a step's windows are neither allocated nor rebound, and each
binding binds the source and positions once.

Like the PyTorch models' caches, whose windows are updated in place, a window tensor taken from the
cache is overwritten by a later step (here the step after next): clone it to keep it.

Each binding also keeps the tensor it writes the logits into, bound once; unlike the windows, a
logits tensor is never written again while anything else holds it or its memory (`step_logits`): a
caller that keeps a step's logits (or a view, or a numpy array, of them) keeps what that step gave.
"""

from __future__ import annotations

import sys

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
        self.logits: list[torch.Tensor | None] = [None, None]  # the tensor binding i writes the logits into

    def next_step(
        self, current: list[torch.Tensor], logits_shape: tuple[int, int, int]
    ) -> tuple[Binding, list[torch.Tensor], torch.Tensor]:
        """The binding for a step from the cache's ``current`` windows (each (B, history, C)), the
        tensors it writes the new windows into and the (B, 1, V) = ``logits_shape`` tensor it writes the
        logits into (`step_logits`).

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
        return self.bindings[reads], self.windows[1 - reads], self.step_logits(reads, logits_shape)

    def step_logits(self, reads: int, shape: tuple[int, int, int]) -> torch.Tensor:
        """The logits tensor of binding ``reads``: the one it wrote last step but one, unless another
        shape or still held elsewhere (a returned output, a view, a numpy array of it), then a new one."""
        held = self.logits[reads]
        if held is None or held.shape != shape or _held_elsewhere(held):
            held = self.logits[reads] = torch.empty(shape, dtype=torch.float32)
        return held


# The references to a logits tensor that `step_logits` holds itself (the list item, ``held``), with
# `_held_elsewhere`'s argument and sys.getrefcount's; the uses of its memory: the tensor's and the
# storage object's that asks.
_OWN_REFERENCES, _OWN_STORAGE_USES = 4, 2


def _held_elsewhere(tensor: torch.Tensor) -> bool:
    """Whether anything besides `StepBuffers.logits` holds ``tensor`` (a reference to it) or its
    memory (a view of it, another tensor on its storage)."""
    if sys.getrefcount(tensor) > _OWN_REFERENCES:
        return True
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata) > _OWN_STORAGE_USES
