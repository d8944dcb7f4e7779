"""`MixerFamily`: everything a family of the generic convolutional models (``conv_modeling``) adds.

The encoder-decoder and decoder-only models are the same for every family but for the sequence
mixer inside each layer's mixer block.  A family describes that mixer once, in a `MixerFamily`;
its configuration classes name it (``family = TALK``), and the models and configurations read it
from there: the models build each layer's core with ``make_core``, the configurations fill and
check the per-layer sizes and the mixer's dropout and offer the presets.

A new family is then one module with its core, its `MixerFamily`, its configurations and its
model classes (one line each), plus one ``talk_hf.register_family(...)`` call
(``tests/models/toy_family.py`` is one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..layers.mixer_block import MixerCore
from .config_checks import MAX_WINDOW

# (config, layer index, causal) -> the mixer core of that encoder (causal=False) or decoder layer.
CoreFactory = Callable[[Any, int, bool], MixerCore]


@dataclass(frozen=True)
class MixerFamily:
    """One family's mixer and the configuration fields that size it.

    Attributes:
        make_core: builds a layer's core (see `MixerCore`) from the configuration, the layer index
            and whether the layer is causal (decoder) or bidirectional (encoder).
        sizes_name: suffix of the per-layer size fields: the configurations hold one list per stack,
            ``encoder_<sizes_name>`` and ``decoder_<sizes_name>``, one int per layer
            (e.g. ``"max_offsets"``, ``"kernel_sizes"``).
        size_minimum: the smallest per-layer size allowed.
        size_maximum: the largest per-layer size allowed (defaults to `MAX_WINDOW`, 65,536: a
            decoder's generation cache holds about that many past inputs per layer).
        size_schedule: ``(first, largest)``: the default sizes grow as ``first, 2 * first + 1, ...``
            up to ``largest`` (`doubling_schedule`).
        dropout_field: the configuration field of the mixer's own dropout (e.g. ``"offset_dropout"``),
            checked as a probability.
        seq2seq_presets / lm_presets: named configurations ``{name: field values}`` of the
            encoder-decoder and the decoder-only configuration (``XConfig.from_preset(name)``).
    """

    make_core: CoreFactory
    sizes_name: str
    size_minimum: int
    size_schedule: tuple[int, int]
    dropout_field: str
    size_maximum: int = MAX_WINDOW
    seq2seq_presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    lm_presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def sizes_field(self, side: str) -> str:
        """The per-layer size field of ``side`` (``"encoder"`` or ``"decoder"``)."""
        return f"{side}_{self.sizes_name}"
