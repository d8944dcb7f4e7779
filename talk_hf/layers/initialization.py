"""Modules that initialise their own tensors.

transformers builds a model on the meta device and then calls the model's ``_init_weights`` on
every submodule; it knows how to fill ``nn.Linear``, ``nn.Embedding`` and ``nn.LayerNorm``, not a
module's own ``nn.Parameter`` or buffer.  A module that holds such tensors derives from
`InitializesItself` and fills them in `init_weights`; the models call it for every such module
(``ConvPreTrainedModel._init_weights``), so no model needs to know the module's class.
"""

from __future__ import annotations

from torch import nn


class InitializesItself(nn.Module):
    """A module whose ``init_weights()`` fills the parameters and buffers it registers itself (not
    those of its children, which are visited on their own)."""

    def init_weights(self) -> None:
        """Fill this module's own tensors as a new model has them, with ``transformers_internals.init``
        functions, which leave weights loaded from a checkpoint alone."""
        raise NotImplementedError(f"{type(self).__name__} must implement init_weights()")
