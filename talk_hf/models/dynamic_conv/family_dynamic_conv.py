"""The DynamicConv / LightConv family (Wu et al., ICLR 2019): a convolution core sized per layer by its
kernel size, a kernel predicted per token (``conv_type="dynamic_conv"``) or learned per layer
(``"light_conv"``)."""

from __future__ import annotations

from ...layers.dynamic_conv_mixer import DynamicConvCore, LightConvCore
from ..mixer_family import MixerFamily
from ..paper_presets import with_paper_presets


def make_dynamic_conv_core(config, layer_idx: int, causal: bool) -> DynamicConvCore | LightConvCore:
    """The DynamicConv or LightConv core of encoder (``causal=False``) or decoder layer ``layer_idx``."""
    core_class = DynamicConvCore if config.conv_type == "dynamic_conv" else LightConvCore
    heads, kernel_size = config.mixer_shape(layer_idx, causal)
    return core_class(config.conv_dim, heads, kernel_size, causal, config.weight_dropout)


# Default kernel sizes 3, 7, 15, 31, 31, ...
DYNAMIC_CONV = with_paper_presets(
    MixerFamily(
        name="dynamic_conv",
        make_core=make_dynamic_conv_core,
        sizes_name="kernel_sizes",
        size_minimum=1,
        size_schedule=(3, 31),
        dropout_field="weight_dropout",
        # One family, two model types for the training scripts: the configurations' `conv_type`.
        variants={"dynamic_conv": {"conv_type": "dynamic_conv"}, "light_conv": {"conv_type": "light_conv"}},
        size_counts_the_token=True,  # a causal kernel of K taps reaches K - 1 tokens back
    ),
    iwslt_encoder_sizes=[3, 7, 15, 31, 31, 31, 31],
    iwslt_decoder_sizes=[3, 7, 15, 31, 31, 31],
    small_sizes=[3, 7, 15],
)
