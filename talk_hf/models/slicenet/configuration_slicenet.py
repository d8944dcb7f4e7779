"""Configuration of the SliceNet models (Kaiser, Gomez & Chollet 2017, arXiv:1706.03059).

Defaults and semantics follow the authors' tensor2tensor code of June 2017 (``attention_type="simple"``);
where the paper's text differs, a field selects the paper's variant.  The separability rule that
turns the one ``separability`` number into per-step values lives here (`step_separabilities`), so
the model and the checks use one definition.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...ops._validation import check_int
from ...ops.depthwise_conv import MAX_KERNEL_SIZE
from ..config_checks import (
    MAX_LAYERS,
    MAX_VOCAB_SIZE,
    MAX_WIDTH,
    MAX_WINDOW,
    CheckedConfig,
    check_positive,
    check_probability,
    check_token_id,
    check_weight_size,
)

MAX_BEAMS = 1024  # default beams of generate(); the paper decodes with 4

# Table 2 of the paper, in its row order: (dilations, kernel sizes, separability, d_model or None).
# The 5-kernel row prints 4 dilations; the code's scheme "1.1.1.1.1" has 5.  Only the two large
# rows state their width.
TABLE2_ROWS: dict[int, tuple[list[int], list[int], int, int | None]] = {
    1: ([1, 2, 4, 8], [3, 3, 3, 3], 1, None),  # None (regular convolutions)
    2: ([1, 2, 4, 8], [3, 3, 3, 3], 0, None),  # Full (depthwise separable)
    3: ([1, 1, 2, 4], [3, 7, 7, 7], 0, None),
    4: ([1, 1, 1, 2], [3, 7, 15, 15], 0, None),
    5: ([1, 1, 1, 1], [3, 7, 15, 31], 0, None),
    6: ([1, 2, 4, 8], [3, 3, 3, 3], 16, None),  # 16 groups (sub-separable)
    7: ([1, 1, 1, 1], [3, 7, 15, 31], -2, None),  # Super 2/3
    8: ([1, 1, 1, 1, 1], [3, 7, 15, 31, 63], 0, 2048),  # Full (2048)
    9: ([1, 1, 1, 1], [3, 7, 15, 31], -2, 3072),  # Super 2/3 (3072)
}


def _table2_fields(row: int) -> dict[str, Any]:
    dilations, kernels, separability, d_model = TABLE2_ROWS[row]
    fields = dict(dilations=dilations, kernel_sizes=kernels, separability=separability)
    return fields if d_model is None else dict(fields, d_model=d_model)


def step_separabilities(separability: int, steps: int) -> list[int]:
    """t2t's per-step separabilities of a block of ``steps`` convolution steps.

    ``separability >= 0`` is used by every step; a negative one counts down to it, so that
    neighbouring steps get co-prime group counts: -2 gives [-3, -2] for 2 steps, [-4, -3, -2] for 3.
    """
    if separability >= 0:
        return [separability] * steps
    return [separability - index for index in reversed(range(steps))]


def conv_groups(separability: int) -> int:
    """The channel groups a separability splits a convolution into (0 and 1: one group)."""
    return max(abs(separability), 1)


def _check_odd(name: str, value: Any) -> None:
    """Require an odd int >= 1 (the encoder pads (k-1)*dilation/2 on each side, as t2t asserts)."""
    check_int(name, value, 1)
    if value % 2 == 0:
        raise ValueError(f"{name} must be odd, got {value}")


def _check_odd_kernels(name: str, values: Any, minimum_length: int) -> None:
    """Require a list of at least ``minimum_length`` odd ints >= 1."""
    if not isinstance(values, (list, tuple)) or len(values) < minimum_length:
        raise ValueError(f"{name} must be a list of at least {minimum_length} odd ints, got {values!r}")
    for index, value in enumerate(values):
        _check_odd(f"{name}[{index}]", value)


def _check_dilations(name: str, values: Any, kernels_name: str, kernels: list[int]) -> None:
    """Require one int in [1, MAX_WINDOW] per kernel."""
    if not isinstance(values, (list, tuple)) or len(values) != len(kernels):
        raise ValueError(f"{name} must hold one dilation per entry of {kernels_name} ({len(kernels)}), got {values!r}")
    for index, value in enumerate(values):
        check_int(f"{name}[{index}]", value, 1, MAX_WINDOW)


def _check_reach(kernel_field: str, kernel: int, dilation: int, step_separability: int) -> None:
    """Require a depthwise step's (separability <= 0) kernel to fit `talk_hf.ops.depthwise_conv` (K <= 63),
    and every step's reach (k - 1) * dilation, the past inputs a decoder step caches, to be <= MAX_WINDOW."""
    if step_separability <= 0 and kernel > MAX_KERNEL_SIZE:
        raise ValueError(
            f"{kernel_field}={kernel}: a depthwise step's (separability <= 0) kernel has at most "
            f"{MAX_KERNEL_SIZE} taps (the depthwise kernels' limit); a dilation widens its reach"
        )
    if (kernel - 1) * dilation > MAX_WINDOW:
        raise ValueError(
            f"{kernel_field}={kernel} with dilation {dilation} reaches (k - 1) * dilation = "
            f"{(kernel - 1) * dilation:,} steps, more than {MAX_WINDOW:,}"
        )


def _check_groups(d_model: int, field: str, separability: int, step_separability: int) -> None:
    """Require d_model divisible by the channel groups of a step (grouped convolutions split it evenly)."""
    groups = conv_groups(step_separability)
    if d_model % groups:
        raise ValueError(
            f"d_model={d_model} must be divisible by {groups}: {field}={separability} gives a "
            f"convolution step {groups} channel groups"
        )


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


class SliceNetConfig(CheckedConfig):
    r"""Configuration of [`SliceNetModel`] / [`SliceNetForConditionalGeneration`].

    Args:
        vocab_size (`int`, *optional*, defaults to 1000): tokens of the one vocabulary shared by source,
            target and output.
        d_model (`int`, *optional*, defaults to 256): feature depth of every step (t2t `hidden_size`;
            2048 / 3072 for the paper's large models, 768 in t2t's `slicenet_1`).
        encoder_layers (`int`, *optional*, defaults to 6): ConvModules of the input encoder (t2t: 1.5 x
            `num_hidden_layers`).
        decoder_layers (`int`, *optional*, defaults to 4): attention-ConvModules of the decoder (t2t
            `num_hidden_layers`).
        kernel_sizes (`list[int]`, *optional*, defaults to `[3, 7, 15, 31]`): one odd kernel per ConvStep
            of a ConvModule, at least 3: the first two steps form the module's first residual
            sub-block, the rest its second.
        dilations (`list[int]`, *optional*, defaults to 1 per entry of `kernel_sizes`): one dilation per
            step, >= 1.
        separability (`int`, *optional*, defaults to 0): t2t semantics: 0 = depthwise separable
            ("Full"), 1 = regular ("None"), g > 1 = g-group sub-separable followed by a 1x1 convolution
            with bias, g < 0 = super-separable, with per-step groups from `step_separabilities` (-2
            gives 3, 2 | 3, 2).
        attention_kernel_sizes / attention_dilations (`list[int]`, *optional*, default to `[5, 5]` /
            `[1, 4]`, as t2t): the causal steps that turn the target into the attention query.
        io_mixer_kernel_size / io_mixer_separability (`int`, *optional*, default to 3 / 4, as t2t): the
            step that mixes the attention output with the target embedding (2 d_model -> d_model
            channels); the paper's text: a separable step (0).
        timing_num_timescales (`int`, *optional*, defaults to 16): t2t's timing signal, sin and cos of
            this many geometric timescales in the first 2n channels, zeros elsewhere.  None: the
            paper's formula, interleaved sin/cos over the whole depth.
        timing_min_timescale / timing_max_timescale (`float`, *optional*, default to 1.0 / 1.0e4): the
            timescale range.
        layer_norm_eps (`float`, *optional*, defaults to 1e-6, as t2t): epsilon of every LayerNorm.
        dropout (`float`, *optional*, defaults to 0.5): dropout rate, applied where `dropout_placement`
            says.
        dropout_placement (`str`, *optional*, defaults to `"stack"`): `"stack"` (t2t): on the encoder
            output and the decoder output; `"module"` (paper): on the output of every ConvModule.
        module_residual (`str`, *optional*, defaults to `"t2t"`): `"t2t"`: a module returns
            x + y + B2(x + y) with y = B1(x); `"paper"`: x + B2(x + y).
        attention_residual (`str`, *optional*, defaults to `"t2t"`): `"t2t"`: a decoder layer returns
            m + LN(m + Attend(q(m))) with m its module's output; `"paper"`: m + Attend(q(x)), the
            query from the layer input x, no LN.
        token_dropout (`float`, *optional*, defaults to 0.0): in training, replace each token id by the
            pad id with this probability (t2t's later `symbol_dropout`; 0.2 in slicenet_1 but a no-op
            in 2017).
        scale_embedding (`bool`, *optional*, defaults to `True`): multiply token embeddings by
            sqrt(d_model).
        final_layer_norm (`bool`, *optional*, defaults to `False`): a LayerNorm on the decoder output,
            before the output layer (not in the paper or t2t, whose untrained model starts at a loss of
            about 24 without it at d_model 384).
        initializer (`str`, *optional*, defaults to `"orthogonal"`): `"orthogonal"` (t2t; TensorFlow's
            kernel orientation) or `"normal"`.
        initializer_gain (`float`, *optional*, defaults to 1.0): gain of the orthogonal initialisation.
        init_std (`float`, *optional*, defaults to 0.02): standard deviation of the convolutions under
            `"normal"`.  Embeddings are always N(0, d_model^-0.5), as in t2t.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`): the output projection is the token
            embedding matrix.
        share_encoder_decoder_embeddings (`bool`, *optional*, defaults to `True`): one token embedding
            for source and target.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id (`int`, *optional*, default
            to 1 / 0 / 2 / 2): special ids; the start token plays t2t's target-space embedding.
        num_beams (`int`, *optional*, defaults to 4): default beam size of `generate()` (the paper
            decodes with beam 4).
        use_cache (`bool`, *optional*, defaults to `True`): return the fixed-size generation state.

    Presets: `SliceNetConfig.from_preset(name, **overrides)`, see `presets`; the rows of the paper's
    Table 2: `SliceNetConfig.from_table2_row(row, d_model=...)`.

    Types and bounds as for every configuration of the package (`talk_hf.models.config_checks`),
    plus: a depthwise step's (separability <= 0) kernel has at most 63 taps (the depthwise kernels'
    limit), every step reaches (k - 1) * dilation <= 65,536 steps back, and `num_beams` <= 1,024.
    """

    model_type = "slicenet"
    attribute_map: ClassVar[dict[str, str]] = {"hidden_size": "d_model", "num_hidden_layers": "decoder_layers"}
    presets: ClassVar[dict[str, dict[str, Any]]] = {
        "wmt-en-de-full-2048": _table2_fields(8),  # Tables 2/3 "Full (2048)": 265.0 M non-embedding
        "wmt-en-de-super-3072": _table2_fields(9),  # Tables 2/3 "Super 2/3 (3072)": 222.4 M
        "t2t-slicenet_1": dict(_table2_fields(7), d_model=768),
        "t2t-slicenet_1tiny": dict(_table2_fields(5), d_model=128, encoder_layers=3, decoder_layers=2),
        # The ConvModule of the paper's section 3.1; it matches no row of Table 2 and states no width.
        "paper-section-3.1": dict(kernel_sizes=[3, 3, 15, 15], dilations=[1, 1, 1, 8], separability=0),
        "small": dict(d_model=64, kernel_sizes=[3, 5, 3], dilations=[1, 2, 1], encoder_layers=2, decoder_layers=2),
    }

    vocab_size: int = 1000
    d_model: int = 256
    encoder_layers: int = 6
    decoder_layers: int = 4
    kernel_sizes: list[int] | None = None
    dilations: list[int] | None = None
    separability: int = 0
    attention_kernel_sizes: list[int] | None = None
    attention_dilations: list[int] | None = None
    io_mixer_kernel_size: int = 3
    io_mixer_separability: int = 4
    timing_num_timescales: int | None = 16
    timing_min_timescale: float = 1.0
    timing_max_timescale: float = 1.0e4
    layer_norm_eps: float = 1e-6
    dropout: float = 0.5
    dropout_placement: str = "stack"
    module_residual: str = "t2t"
    attention_residual: str = "t2t"
    token_dropout: float = 0.0
    scale_embedding: bool = True
    final_layer_norm: bool = False
    initializer: str = "orthogonal"
    initializer_gain: float = 1.0
    init_std: float = 0.02
    tie_word_embeddings: bool = True
    share_encoder_decoder_embeddings: bool = True
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 2
    num_beams: int = 4
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def fill_defaults(self) -> None:
        """Fill the list fields left None (dataclass fields cannot default to a list)."""
        if self.kernel_sizes is None:
            self.kernel_sizes = [3, 7, 15, 31]
        if self.dilations is None:
            self.dilations = [1] * len(self.kernel_sizes)
        if self.attention_kernel_sizes is None:
            self.attention_kernel_sizes = [5, 5]
        if self.attention_dilations is None:
            self.attention_dilations = [1, 4]

    def module_separabilities(self) -> list[int]:
        """Per step of a ConvModule: t2t's rule applied to each residual sub-block."""
        second_block = len(self.kernel_sizes) - 2
        return step_separabilities(self.separability, 2) + step_separabilities(self.separability, second_block)

    def attention_separabilities(self) -> list[int]:
        """Per query step of an attention block (t2t: [s - 1, s] for s < 0)."""
        return step_separabilities(self.separability, len(self.attention_kernel_sizes))

    def conv_steps(self) -> list[tuple[str, int, int, str, int]]:
        """The convolution steps the fields size: ``(kernel field, kernel size, dilation, separability
        field, the step's separability)`` for each step of a ConvModule, of an attention query and the
        IO mixer."""
        module = zip(self.kernel_sizes, self.dilations, self.module_separabilities(), strict=True)
        attention = zip(
            self.attention_kernel_sizes, self.attention_dilations, self.attention_separabilities(), strict=True
        )
        io_mixer = ("io_mixer_kernel_size", self.io_mixer_kernel_size, 1, "io_mixer_separability")
        return (
            [(f"kernel_sizes[{i}]", k, d, "separability", s) for i, (k, d, s) in enumerate(module)]
            + [(f"attention_kernel_sizes[{i}]", k, d, "separability", s) for i, (k, d, s) in enumerate(attention)]
            + [(*io_mixer, self.io_mixer_separability)]
        )

    def check_fields(self) -> None:
        """Check every field; each error names the field and what was expected."""
        check_int("vocab_size", self.vocab_size, 1, MAX_VOCAB_SIZE)
        check_int("d_model", self.d_model, 1, MAX_WIDTH)
        check_int("encoder_layers", self.encoder_layers, 1, MAX_LAYERS)
        check_int("decoder_layers", self.decoder_layers, 1, MAX_LAYERS)
        check_int("num_beams", self.num_beams, 1, MAX_BEAMS)
        _check_odd_kernels("kernel_sizes", self.kernel_sizes, 3)
        _check_dilations("dilations", self.dilations, "kernel_sizes", self.kernel_sizes)
        _check_odd_kernels("attention_kernel_sizes", self.attention_kernel_sizes, 1)
        _check_dilations(
            "attention_dilations", self.attention_dilations, "attention_kernel_sizes", self.attention_kernel_sizes
        )
        _check_odd("io_mixer_kernel_size", self.io_mixer_kernel_size)
        check_int("separability", self.separability, -self.d_model, self.d_model)
        check_int("io_mixer_separability", self.io_mixer_separability, -self.d_model, self.d_model)
        for kernel_field, kernel, dilation, separability_field, step_separability in self.conv_steps():
            _check_groups(self.d_model, separability_field, getattr(self, separability_field), step_separability)
            _check_reach(kernel_field, kernel, dilation, step_separability)
        if self.timing_num_timescales is not None:
            check_int("timing_num_timescales", self.timing_num_timescales, 1)
            if 2 * self.timing_num_timescales > self.d_model:
                raise ValueError(
                    f"timing_num_timescales={self.timing_num_timescales} needs 2 * timing_num_timescales "
                    f"<= d_model={self.d_model} channels"
                )
        for name in ("timing_min_timescale", "timing_max_timescale", "layer_norm_eps", "initializer_gain", "init_std"):
            check_positive(name, getattr(self, name))
        check_probability("dropout", self.dropout)
        check_probability("token_dropout", self.token_dropout)
        if self.token_dropout > 0 and self.pad_token_id is None:
            raise ValueError("token_dropout > 0 replaces ids by pad_token_id, which must then be set")
        _check_choice("dropout_placement", self.dropout_placement, ("stack", "module"))
        _check_choice("module_residual", self.module_residual, ("t2t", "paper"))
        _check_choice("attention_residual", self.attention_residual, ("t2t", "paper"))
        _check_choice("initializer", self.initializer, ("orthogonal", "normal"))
        if self.decoder_start_token_id is None:
            raise ValueError("decoder_start_token_id must be set for an encoder-decoder model")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            if getattr(self, name) is not None:
                check_token_id(name, getattr(self, name), self.vocab_size)
        check_weight_size("token embedding", ("vocab_size", self.vocab_size), ("d_model", self.d_model))
        check_weight_size("pointwise convolution", ("d_model", self.d_model), ("d_model", self.d_model))

    @classmethod
    def from_preset(cls, name: str, **overrides) -> SliceNetConfig:
        """A named configuration (see `presets`) with field overrides; a preset that states no
        width (``paper-section-3.1``) needs ``d_model``."""
        if name not in cls.presets:
            raise ValueError(f"unknown preset {name!r} for {cls.__name__}; choose one of {sorted(cls.presets)}")
        fields = {**cls.presets[name], **overrides}
        if "d_model" not in fields:
            raise ValueError(f"preset {name!r} states no width: pass d_model=...")
        return cls(**fields)

    @classmethod
    def from_table2_row(cls, row: int, d_model: int | None = None, **overrides) -> SliceNetConfig:
        """The model of row ``row`` (1-9, in the paper's order) of Table 2, with field overrides.

        Rows 1-7 state no width, so they need ``d_model``; rows 8 and 9 default to theirs (2048, 3072).
        """
        if row not in TABLE2_ROWS:
            raise ValueError(f"row must be one of Table 2's rows {sorted(TABLE2_ROWS)}, got {row!r}")
        fields = _table2_fields(row)
        if d_model is not None:
            fields["d_model"] = d_model
        elif "d_model" not in fields:
            raise ValueError(f"Table 2 row {row} states no width: pass d_model=...")
        return cls(**{**fields, **overrides})
