"""The papers' named configurations of the generic models (Wu et al. 2019, Lioutas & Guo 2020), for any family.

A family's presets differ only in its per-layer sizes (`with_paper_presets` takes them); the widths,
layer counts, heads, GLU switch and regularisation are the papers'.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .mixer_family import MixerFamily


def _preset(
    *,
    d_model: int,
    ffn_dim: int,
    heads: int,
    use_glu: bool,
    sizes_name: str,
    decoder_sizes: list[int],
    encoder_sizes: list[int] | None = None,
    **extra,
) -> dict:
    """A preset's fields.

    Args:
        d_model / ffn_dim / heads / use_glu: the width, the FFN width and the mixer heads of every
            stack (and the cross-attention heads), and the GLU switch.
        sizes_name: the family's per-layer field suffix.
        decoder_sizes: per decoder layer, ``decoder_<sizes_name>`` (their count sets ``decoder_layers``).
        encoder_sizes: per encoder layer, ``encoder_<sizes_name>``; None for a decoder-only preset.
        extra: further fields.
    """
    preset = dict(
        d_model=d_model,
        decoder_ffn_dim=ffn_dim,
        decoder_conv_heads=heads,
        use_glu=use_glu,
        decoder_layers=len(decoder_sizes),
        **{f"decoder_{sizes_name}": decoder_sizes},
        **extra,
    )
    if encoder_sizes is not None:
        preset.update(
            encoder_ffn_dim=ffn_dim,
            encoder_conv_heads=heads,
            decoder_attention_heads=heads,
            encoder_layers=len(encoder_sizes),
            **{f"encoder_{sizes_name}": encoder_sizes},
        )
    return preset


def seq2seq_presets(
    *,
    sizes_name: str,
    mixer_dropout_field: str,
    iwslt_encoder_sizes: list[int],
    iwslt_decoder_sizes: list[int],
    small_sizes: list[int],
) -> dict[str, dict[str, Any]]:
    """The papers' encoder-decoder presets for one family.

    Args:
        sizes_name: the family's per-layer field suffix (``max_offsets`` or ``kernel_sizes``).
        mixer_dropout_field: the family's offset/kernel dropout field.
        iwslt_encoder_sizes / iwslt_decoder_sizes: per-layer sizes of the IWSLT14 De-En model (they
            differ by family).
        small_sizes: per-layer sizes of the 3 + 3 layer CPU preset.
    """
    big_encoder, big_decoder = [3, 7, 15, 31, 31, 31, 31], [3, 7, 15, 31, 31, 31]
    regularised = dict(dropout=0.3, **{mixer_dropout_field: 0.1})
    return {
        "iwslt14-de-en": _preset(
            d_model=512,
            ffn_dim=1024,
            heads=4,
            use_glu=False,
            sizes_name=sizes_name,
            decoder_sizes=iwslt_decoder_sizes,
            encoder_sizes=iwslt_encoder_sizes,
            **regularised,
            share_encoder_decoder_embeddings=False,
        ),
        "wmt-big": _preset(
            d_model=1024,
            ffn_dim=4096,
            heads=16,
            use_glu=True,
            sizes_name=sizes_name,
            decoder_sizes=big_decoder,
            encoder_sizes=big_encoder,
            **regularised,
        ),
        "cnn-dm": _preset(
            d_model=512,
            ffn_dim=2048,
            heads=8,
            use_glu=True,
            sizes_name=sizes_name,
            decoder_sizes=big_decoder,
            encoder_sizes=big_encoder,
        ),
        "cnn-dm-deep": _preset(
            d_model=512,
            ffn_dim=2048,
            heads=8,
            use_glu=True,
            sizes_name=sizes_name,
            decoder_sizes=[3, 7] + [31] * 8,
            encoder_sizes=[3, 7, 15] + [31] * 7,
        ),
        "small": _preset(
            d_model=256,
            ffn_dim=1024,
            heads=4,
            use_glu=True,
            sizes_name=sizes_name,
            decoder_sizes=small_sizes,
            encoder_sizes=small_sizes,
        ),
    }


def lm_presets(*, sizes_name: str, small_sizes: list[int]) -> dict[str, dict[str, Any]]:
    """The decoder-only presets: WikiText-103 (the TaLK authors' per-layer sizes, r = 0) and a small one."""
    return {
        "wikitext-103": _preset(
            d_model=1024,
            ffn_dim=4096,
            heads=8,
            use_glu=True,
            sizes_name=sizes_name,
            decoder_sizes=[3, 5, 7, 15, 31] + [63] * 12,
            vocab_size=267744,
            dropout=0.3,
        ),
        "small": _preset(
            d_model=256, ffn_dim=1024, heads=4, use_glu=True, sizes_name=sizes_name, decoder_sizes=small_sizes
        ),
    }


def with_paper_presets(
    family: MixerFamily, *, iwslt_encoder_sizes: list[int], iwslt_decoder_sizes: list[int], small_sizes: list[int]
) -> MixerFamily:
    """``family`` with the papers' presets (`seq2seq_presets`, `lm_presets`) for its per-layer sizes.

    Args:
        iwslt_encoder_sizes / iwslt_decoder_sizes: per-layer sizes of the IWSLT14 De-En model.
        small_sizes: per-layer sizes of the 3-layer CPU presets.
    """
    return dataclasses.replace(
        family,
        seq2seq_presets=seq2seq_presets(
            sizes_name=family.sizes_name,
            mixer_dropout_field=family.dropout_field,
            iwslt_encoder_sizes=iwslt_encoder_sizes,
            iwslt_decoder_sizes=iwslt_decoder_sizes,
            small_sizes=small_sizes,
        ),
        lm_presets=lm_presets(sizes_name=family.sizes_name, small_sizes=small_sizes),
    )
