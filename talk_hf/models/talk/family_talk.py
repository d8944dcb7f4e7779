"""The TaLK family (Lioutas & Guo, ICML 2020): the TaLK core, sized per layer by its maximum offset."""

from __future__ import annotations

from ...layers.talk_mixer import TaLKCore
from ..mixer_family import MixerFamily
from ..paper_presets import with_paper_presets


def make_talk_core(config, layer_idx: int, causal: bool) -> TaLKCore:
    """The TaLK core of encoder (``causal=False``) or decoder layer ``layer_idx``."""
    heads, max_offset = config.mixer_shape(layer_idx, causal)
    return TaLKCore(config.conv_dim, heads, max_offset, causal, config.offset_dropout)


# Default maximum offsets 1, 3, 7, 15, 15, ...
TALK = with_paper_presets(
    MixerFamily(
        name="talk",
        make_core=make_talk_core,
        sizes_name="max_offsets",
        size_minimum=0,
        size_schedule=(1, 15),
        dropout_field="offset_dropout",
    ),
    iwslt_encoder_sizes=[1, 3, 7, 15, 15, 15, 15],
    iwslt_decoder_sizes=[1, 3, 7, 15, 15, 15],
    small_sizes=[1, 3, 7],
)
