"""Fields and checks shared by the configurations of the generic models (TaLK / DynamicConv, seq2seq / LM).

A family configuration (``configuration_talk.py``, ``configuration_dynamic_conv.py``) names its
`MixerFamily` (``family = TALK``) and declares its mixer's fields (per-layer sizes, dropout); the
family tells these base classes how to fill and check them.  As a `CheckedConfig`, a configuration
checks every field's type, fills the defaults that depend on other fields, then checks every field's
value and bounds (``config_checks``) and the sizes of the weights they make, with errors that name
the offending field.  The papers' presets of a family are built in ``paper_presets``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from ..ops._validation import check_int
from .config_checks import (
    MAX_LAYERS,
    MAX_POSITION_OFFSET,
    MAX_VOCAB_SIZE,
    MAX_WIDTH,
    CheckedConfig,
    check_divisible,
    check_per_layer,
    check_probability,
    check_token_id,
    check_weight_size,
)
from .mixer_family import MixerFamily

ACTIVATIONS = ("relu", "gelu", "swish", "silu", "gelu_new", "tanh")


def doubling_schedule(layers: int, first: int, largest: int) -> list[int]:
    """Per-layer sizes that grow like the papers' (first, 2*first+1, ...) and stop at ``largest``."""
    sizes, size = [], first
    for _ in range(layers):
        sizes.append(size)
        size = min(2 * size + 1, largest)
    return sizes


class _FamilyPresets:
    """``XConfig.presets``: the named configurations ``{name: fields}`` that the configuration's
    `MixerFamily` holds for its kind of model (``seq2seq_presets`` or ``lm_presets``)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __get__(self, instance, owner) -> Mapping[str, Mapping[str, Any]]:
        return {} if owner.family is None else getattr(owner.family, self.kind)


class ConvLMConfigBase(CheckedConfig):
    r"""Fields common to every model of the package (the decoder side and the embeddings).

    Args:
        vocab_size (`int`, *optional*, defaults to 1000): number of tokens; the first dimension of the
            embedding matrices.
        d_model (`int`, *optional*, defaults to 256): width of the residual stream (embeddings and block
            outputs).
        conv_dim (`int`, *optional*, defaults to `d_model`): width inside the mixer blocks (after the input
            projection). Must be divisible by the mixer's head count.
        decoder_layers (`int`, *optional*, defaults to 3): number of decoder blocks.
        decoder_ffn_dim (`int`, *optional*, defaults to 1024): hidden width of the decoder's feed-forward
            blocks.
        decoder_conv_heads (`int`, *optional*, defaults to 4): heads of the decoder's mixer (TaLK offsets
            or conv kernels).
        use_glu (`bool`, *optional*, defaults to `True`): input projection `Linear(d_model, 2*conv_dim)` +
            GLU when True, `Linear(d_model, conv_dim)` otherwise.
        activation_function (`str`, *optional*, defaults to `"relu"`): FFN activation, one of `relu`,
            `gelu`, `swish`, `silu`, `gelu_new`, `tanh`.
        decoder_normalize_before (`bool`, *optional*, defaults to `False`): pre-norm decoder blocks (plus a
            final LayerNorm, see `decoder_final_layer_norm`) when True, post-norm otherwise.
        decoder_final_layer_norm (`bool`, *optional*, defaults to `True`): with pre-norm decoder blocks, a
            LayerNorm after the last block (True, as in fairseq's translation models); fairseq's conv LM
            has none (False). Ignored with post-norm blocks.
        position_offset (`int`, *optional*, defaults to 0): added to every token's position (0 for the
            first real token) before the sinusoidal embedding; fairseq's models count from
            `padding_idx + 1` (2).
        dropout (`float`, *optional*, defaults to 0.1): dropout after embeddings and on every block's
            output.
        activation_dropout (`float`, *optional*, defaults to 0.0): dropout after the FFN activation.
        input_dropout (`float`, *optional*, defaults to 0.0): dropout on a mixer block's input (before its
            projection).
        scale_embedding (`bool`, *optional*, defaults to `True`): multiply token embeddings by
            sqrt(d_model).
        init_std (`float`, *optional*, defaults to 0.02): standard deviation of the normal weight
            initialisation.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`): share the output projection with the
            (decoder) input embeddings.
        pad_token_id / bos_token_id / eos_token_id (`int`, *optional*, default to 1 / 0 / 2): special
            token ids.
        use_cache (`bool`, *optional*, defaults to `True`): return the fixed-size generation state
            (`cache`; `past_key_values` before transformers 5.24).

    Every field holds the type its annotation states (a bool is `True` or `False`, never a string; an
    int is never a float, not even `3.0`) and sizes have upper bounds (vocabularies 2**24, widths
    2**18, layers 4,096, windows 65,536, `position_offset` 2**20, 2**33 elements per weight matrix):
    see `talk_hf.models.config_checks`.  Each is checked when the configuration is built, loaded,
    updated or saved, and again when a model is built from it (a field set by `setattr` skips the
    other checks), with an error that names the field.
    """

    attribute_map: ClassVar[dict[str, str]] = {"hidden_size": "d_model", "num_hidden_layers": "decoder_layers"}
    # The family's mixer, per-layer sizes, mixer dropout and presets: set by each family configuration.
    family: ClassVar[MixerFamily | None] = None
    presets = _FamilyPresets("lm_presets")
    stacks: ClassVar[tuple[str, ...]] = ("decoder",)  # the layer stacks, each with its per-layer sizes

    vocab_size: int = 1000
    d_model: int = 256
    conv_dim: int | None = None
    decoder_layers: int = 3
    decoder_ffn_dim: int = 1024
    decoder_conv_heads: int = 4
    use_glu: bool = True
    activation_function: str = "relu"
    decoder_normalize_before: bool = False
    decoder_final_layer_norm: bool = True
    position_offset: int = 0
    dropout: float = 0.1
    activation_dropout: float = 0.0
    input_dropout: float = 0.0
    scale_embedding: bool = True
    init_std: float = 0.02
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    use_cache: bool = True

    def __init_subclass__(cls, **kwargs):
        """Check, when a family configuration is defined, that it declares the fields its family names."""
        super().__init_subclass__(**kwargs)  # transformers makes the class a dataclass here
        if cls.family is not None:
            cls.family.check_fields_of(cls)

    def __post_init__(self, **kwargs):
        if self.family is None:
            raise TypeError(f"{type(self).__name__} names no MixerFamily: a family configuration sets `family`")
        super().__post_init__(**kwargs)

    def per_layer_fields(self) -> dict[str, str]:
        """The family's per-layer size fields, each with the layer-count field it follows."""
        return {self.family.sizes_field(stack): f"{stack}_layers" for stack in self.stacks}

    def fill_defaults(self) -> None:
        """Fill the fields left None whose default depends on others: `conv_dim` and the per-layer
        sizes (the family's schedule over the layer count, checked first); subclasses extend it."""
        if self.conv_dim is None:
            self.conv_dim = self.d_model
        for field, layers_field in self.per_layer_fields().items():
            if getattr(self, field) is None:
                layers = getattr(self, layers_field)
                check_int(layers_field, layers, 1, MAX_LAYERS)
                setattr(self, field, doubling_schedule(layers, *self.family.size_schedule))

    def mixer_shape(self, layer_idx: int, causal: bool) -> tuple[int, int]:
        """``(heads, size)`` of the mixer of decoder (``causal``) or encoder layer ``layer_idx``: the
        stack's ``<stack>_conv_heads`` and the layer's entry of its per-layer sizes."""
        stack = "decoder" if causal else "encoder"
        return getattr(self, f"{stack}_conv_heads"), getattr(self, self.family.sizes_field(stack))[layer_idx]

    def check_fields(self) -> None:
        """Check the fields, then the per-layer sizes against the layer counts, then the weights' sizes."""
        self.validate_fields()
        self.validate_per_layer_fields()
        for weight, dims in self.weight_shapes().items():
            check_weight_size(weight, *dims)

    def validate_fields(self) -> None:
        """Check every field but the per-layer sizes; subclasses extend the checks."""
        check_int("vocab_size", self.vocab_size, 1, MAX_VOCAB_SIZE)
        check_int("d_model", self.d_model, 1, MAX_WIDTH)
        check_int("conv_dim", self.conv_dim, 1, MAX_WIDTH)
        check_int("decoder_layers", self.decoder_layers, 1, MAX_LAYERS)
        check_int("decoder_ffn_dim", self.decoder_ffn_dim, 1, MAX_WIDTH)
        check_int("position_offset", self.position_offset, 0, MAX_POSITION_OFFSET)
        check_divisible("conv_dim", self.conv_dim, "decoder_conv_heads", self.decoder_conv_heads)
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(f"activation_function must be one of {ACTIVATIONS}, got {self.activation_function!r}")
        for name in ("dropout", "activation_dropout", "input_dropout", self.family.dropout_field):
            check_probability(name, getattr(self, name))
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if getattr(self, name) is not None:
                check_token_id(name, getattr(self, name), self.vocab_size)

    def validate_per_layer_fields(self) -> None:
        """Check the family's per-layer sizes against the layer counts (after all counts are checked)."""
        for field, layers_field in self.per_layer_fields().items():
            check_per_layer(
                field,
                getattr(self, field),
                layers_field,
                getattr(self, layers_field),
                self.family.size_minimum,
                self.family.size_maximum,
            )

    def weight_shapes(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """The largest weight matrices the fields make, ``{name: ((what sets a dim, its size), ...)}``
        (`check_weight_size`); subclasses add theirs."""
        projection = ("2 * conv_dim", 2 * self.conv_dim) if self.use_glu else ("conv_dim", self.conv_dim)
        return {
            "token embedding": (("vocab_size", self.vocab_size), ("d_model", self.d_model)),
            "mixer input projection": (("d_model", self.d_model), projection),
            "decoder FFN": (("d_model", self.d_model), ("decoder_ffn_dim", self.decoder_ffn_dim)),
        }

    @classmethod
    def from_preset(cls, name: str, **overrides):
        """Build a named configuration (see ``cls.presets``, the family's), with field overrides."""
        if name not in cls.presets:
            raise ValueError(f"unknown preset {name!r} for {cls.__name__}; choose one of {sorted(cls.presets)}")
        return cls(**{**cls.presets[name], **overrides})


class ConvSeq2SeqConfigBase(ConvLMConfigBase):
    r"""Fields common to the encoder-decoder models, on top of [`ConvLMConfigBase`]'s.

    Args:
        encoder_layers (`int`, *optional*, defaults to 3): number of encoder blocks.
        encoder_ffn_dim (`int`, *optional*, defaults to 1024): hidden width of the encoder's feed-forward
            blocks.
        encoder_conv_heads (`int`, *optional*, defaults to 4): heads of the encoder's mixer.
        decoder_attention_heads (`int`, *optional*, defaults to 4): heads of the decoder's cross-attention
            (must divide d_model).
        encoder_normalize_before (`bool`, *optional*, defaults to `False`): pre-norm encoder blocks (plus
            a final LayerNorm).
        attention_dropout (`float`, *optional*, defaults to 0.0): dropout on the cross-attention
            probabilities.
        share_encoder_decoder_embeddings (`bool`, *optional*, defaults to `True`): one token embedding for
            source and target (a joint vocabulary); independent of `tie_word_embeddings`, which ties the
            LM head to it.
        decoder_vocab_size (`int`, *optional*, defaults to `vocab_size`): size of the target vocabulary
            (decoder embeddings and LM head) when it differs from the source's `vocab_size`, as in
            fairseq models with two dictionaries. A separate size needs
            `share_encoder_decoder_embeddings=False`.
        decoder_start_token_id (`int`, *optional*, defaults to 2): first decoder input; labels are
            shifted right behind it.
    """

    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
        "num_attention_heads": "decoder_attention_heads",
    }

    encoder_layers: int = 3
    encoder_ffn_dim: int = 1024
    encoder_conv_heads: int = 4
    decoder_attention_heads: int = 4
    encoder_normalize_before: bool = False
    attention_dropout: float = 0.0
    share_encoder_decoder_embeddings: bool = True
    decoder_vocab_size: int | None = None
    decoder_start_token_id: int | None = 2
    is_encoder_decoder: bool = True
    presets = _FamilyPresets("seq2seq_presets")
    stacks: ClassVar[tuple[str, ...]] = ("encoder", "decoder")

    def __setattr__(self, name: str, value: Any) -> None:
        """With shared embeddings there is one vocabulary: setting ``vocab_size`` after construction (as
        transformers' resizing and tests do) sets ``decoder_vocab_size`` along with it."""
        one_vocabulary = getattr(self, "share_encoder_decoder_embeddings", False) is True and getattr(
            self, "decoder_vocab_size", None
        ) == getattr(self, "vocab_size", None)
        if name == "vocab_size" and one_vocabulary:
            super().__setattr__("decoder_vocab_size", value)
        super().__setattr__(name, value)

    def get_text_config(self, decoder=None, encoder=None):
        """transformers' text configuration, except that the one asked for without naming a side reads
        ``vocab_size`` as the target vocabulary, ``decoder_vocab_size``: generate sizes the scores of
        generated tokens by it (beam search's candidates before transformers 5.24, transition scores,
        watermarking, prompt lookup).  With two vocabularies that view is a shallow copy (written
        fields do not reach this configuration; ``resize_token_embeddings`` writes both sizes itself)."""
        if decoder is None and encoder is None and self.decoder_vocab_size not in (None, self.vocab_size):
            target_view = copy.copy(self)
            object.__setattr__(target_view, "vocab_size", self.decoder_vocab_size)
            return target_view
        return super().get_text_config(decoder=decoder, encoder=encoder)

    def fill_defaults(self) -> None:
        super().fill_defaults()
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size

    def validate_fields(self) -> None:
        super().validate_fields()
        check_int("decoder_vocab_size", self.decoder_vocab_size, 1, MAX_VOCAB_SIZE)
        if self.share_encoder_decoder_embeddings and self.decoder_vocab_size != self.vocab_size:
            raise ValueError(
                f"share_encoder_decoder_embeddings=True needs one vocabulary, but decoder_vocab_size="
                f"{self.decoder_vocab_size} differs from vocab_size={self.vocab_size}"
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if getattr(self, name) is not None:
                check_token_id(name, getattr(self, name), self.decoder_vocab_size, "decoder_vocab_size")
        check_int("encoder_layers", self.encoder_layers, 1, MAX_LAYERS)
        check_int("encoder_ffn_dim", self.encoder_ffn_dim, 1, MAX_WIDTH)
        check_divisible("conv_dim", self.conv_dim, "encoder_conv_heads", self.encoder_conv_heads)
        check_divisible("d_model", self.d_model, "decoder_attention_heads", self.decoder_attention_heads)
        check_probability("attention_dropout", self.attention_dropout)
        if self.decoder_start_token_id is None:
            raise ValueError("decoder_start_token_id must be set for an encoder-decoder model")
        check_token_id(
            "decoder_start_token_id", self.decoder_start_token_id, self.decoder_vocab_size, "decoder_vocab_size"
        )

    def weight_shapes(self) -> dict[str, tuple[tuple[str, int], ...]]:
        return {
            **super().weight_shapes(),
            "decoder token embedding": (("decoder_vocab_size", self.decoder_vocab_size), ("d_model", self.d_model)),
            "encoder FFN": (("d_model", self.d_model), ("encoder_ffn_dim", self.encoder_ffn_dim)),
            "cross-attention projection": (("d_model", self.d_model), ("d_model", self.d_model)),
        }
