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

    def __init_subclass__(cls, **kwargs):
        """A subclass without its own ``init_weights`` is an error where it is defined, not when a
        model is first built."""
        super().__init_subclass__(**kwargs)
        if cls.init_weights is InitializesItself.init_weights:
            raise TypeError(f"{cls.__name__} subclasses InitializesItself but defines no init_weights()")

    def init_weights(self) -> None:
        """Fill this module's own tensors as a new model has them, with ``transformers_internals.init``
        functions, which leave weights loaded from a checkpoint alone (every subclass defines it)."""
