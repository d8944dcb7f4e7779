"""`MixerFamily`: everything a family of the generic convolutional models (``conv_modeling``) adds.

The encoder-decoder and decoder-only models are the same for every family but for the sequence
mixer inside each layer's mixer block.  A family describes that mixer once, in a `MixerFamily`;
its configuration classes name it (``family = TALK``), and the models and configurations read it
from there: the models build each layer's core with ``make_core``, the configurations fill and
check the per-layer sizes and the mixer's dropout and offer the presets.

A new family is then one module with its core, its `MixerFamily`, its configurations and its
model classes (one line each), plus one ``talk_hf.register_family(...)`` call
(``tests/models/toy_family.py`` is one).  A configuration class that names a family but lacks a
field the family names fails when the class is defined (`MixerFamily.check_fields_of`).  The
training scripts and benchmarks read the registered families (``talk_hf.models.families``), so a
registered family trains and benchmarks under its ``name`` (or its ``variants``' names).
"""

from __future__ import annotations

import dataclasses
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
        name: the family's name, in errors and as the training scripts' ``--model_type`` (unless
            ``variants`` name its model types).
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
        variants: the model types the training scripts offer for the family, ``{name: the fields
            that name sets}`` (DynamicConv's ``light_conv`` sets ``conv_type="light_conv"``); empty:
            one model type, ``name``.
        size_counts_the_token: whether a layer's size counts the token itself besides the tokens its
            causal window reaches back (a kernel of K taps reaches K - 1 back: True; a maximum offset
            reaches that many: False).  The benchmarks size every family's layers by their reach.
    """

    name: str
    make_core: CoreFactory
    sizes_name: str
    size_minimum: int
    size_schedule: tuple[int, int]
    dropout_field: str
    size_maximum: int = MAX_WINDOW
    seq2seq_presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    lm_presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    size_counts_the_token: bool = False

    def sizes_field(self, side: str) -> str:
        """The per-layer size field of ``side`` (``"encoder"`` or ``"decoder"``)."""
        return f"{side}_{self.sizes_name}"

    def size_of_reach(self, reach: int) -> int:
        """The per-layer size of a layer whose causal window reaches ``reach`` tokens back."""
        return reach + 1 if self.size_counts_the_token else reach

    def model_type_variants(self) -> Mapping[str, Mapping[str, Any]]:
        """The training scripts' model types of the family, ``{name: the fields that name sets}``."""
        return self.variants or {self.name: {}}

    def check_fields_of(self, config_class: type) -> None:
        """Require the dataclass ``config_class`` to declare the fields this family names: the
        per-layer sizes of each of its ``stacks`` and the mixer's dropout.

        Raises:
            TypeError: naming the class, the family and the missing fields.
        """
        declared = {declared_field.name for declared_field in dataclasses.fields(config_class)}
        named = [*(self.sizes_field(stack) for stack in config_class.stacks), self.dropout_field]
        missing = [name for name in named if name not in declared]
        if missing:
            raise TypeError(
                f"{config_class.__name__} names the MixerFamily {self.name!r}, whose fields {missing} it does not "
                f"declare: add them to the class (e.g. `{missing[0]}: ... = ...`)"
            )
