"""fairseq model arguments -> a talk_hf configuration.

fairseq's ``lightconv`` / ``lightconv_lm`` models (LightConv and DynamicConv, Wu et al. 2019) and
the TaLK authors' ``talkconv`` / ``talkconv_lm`` plugin models map one-to-one onto talk_hf's
``dynamic_conv`` / ``dynamic_conv_lm`` and ``talk`` / ``talk_lm`` models, with fairseq's position
offset (positions start at ``padding_idx + 1``), its pre-norm LM without a final LayerNorm, and
separate source and target vocabularies.  Options talk_hf has no counterpart for are refused with a
``ValueError`` that names each of them (:func:`unsupported_features`).
"""

from __future__ import annotations

from transformers import PretrainedConfig

from ..models.dynamic_conv.configuration_dynamic_conv import (
    DynamicConvConfig,
    DynamicConvLMConfig,
    canonical_conv_type,
)
from ..models.talk.configuration_talk import TaLKConfig, TaLKLMConfig
from .fairseq_checkpoint import FairseqCheckpoint
from .fairseq_dictionary import BOS_ID, EOS_ID, PAD_ID
from .fairseq_weights import parameter_families

FAMILIES = ("lightconv", "talk")
_FAMILY_NAMES = {"lightconv": "fairseq's LightConv/DynamicConv", "talk": "the TaLK authors' plugin"}
_CONFIG_CLASSES = {
    ("lightconv", False): DynamicConvConfig,
    ("lightconv", True): DynamicConvLMConfig,
    ("talk", False): TaLKConfig,
    ("talk", True): TaLKLMConfig,
}
# The FFN activation is fixed in fairseq's code: ReLU in lightconv.py, swish x*sigmoid(x) in the
# TaLK plugin (transformers' "swish" is the same function).
_ACTIVATIONS = {"lightconv": "relu", "talk": "swish"}
# The architectures' default kernel sizes (LightConv/DynamicConv) or reaches (TaLK) per stack.
_DEFAULT_KERNEL_SIZES = {
    ("lightconv", "encoder"): [3, 7, 15, 31, 31, 31, 31],
    ("lightconv", "decoder"): [3, 7, 15, 31, 31, 31],
    ("talk", "encoder"): [1, 3, 7, 15, 15, 15, 15],
    ("talk", "decoder"): [1, 3, 7, 15, 15, 15],
}


def detect_family(checkpoint: FairseqCheckpoint) -> str:
    """``"lightconv"`` for fairseq's ``lightconv*`` architectures, ``"talk"`` for ``talkconv*``."""
    arch = checkpoint.arch
    if arch.startswith("talkconv"):
        return "talk"
    if arch.startswith("lightconv"):
        return "lightconv"
    raise ValueError(
        f"arch {arch!r} is neither a fairseq LightConv/DynamicConv architecture (lightconv*) nor a "
        f"TaLK one (talkconv*); pass --family lightconv or --family talk if it is one under another name"
    )


def check_parameters_family(checkpoint: FairseqCheckpoint, family: str) -> None:
    """Refuse ``family`` when the checkpoint's convolution parameters are only another family's.

    Raises:
        ValueError: naming the checkpoint, a parameter of the other family and the ``--family`` to pass.
    """
    found = parameter_families(checkpoint.state_dict)
    if family not in found and len(found) == 1:
        other, example = next(iter(found.items()))
        raise ValueError(
            f"{checkpoint.path} ({checkpoint.arch}) is converted as family {family!r}, but its convolution "
            f"parameters are those of family {other!r} ({example}, {_FAMILY_NAMES[other]}): pass --family {other}"
        )


def is_language_model(checkpoint: FairseqCheckpoint) -> bool:
    """A decoder-only checkpoint (``lightconv_lm``, ``talkconv_lm``): no encoder parameters."""
    return not any(name.startswith("encoder.") for name in checkpoint.state_dict)


class _Arguments:
    """Read access to a checkpoint's saved arguments with fairseq's ``base_architecture`` fallbacks
    for the ones that old checkpoints may lack; a missing argument without a fallback raises, named
    with the checkpoint."""

    def __init__(self, checkpoint: FairseqCheckpoint):
        self.args = checkpoint.args
        self.path = checkpoint.path

    def get(self, name: str, default=None):
        return getattr(self.args, name, default)

    def require(self, name: str):
        if getattr(self.args, name, None) is None:
            raise ValueError(f"{self.path}: the checkpoint's arguments lack {name!r}, which the conversion needs")
        return getattr(self.args, name)

    def kernel_sizes(self, side: str, family: str) -> list[int]:
        """``<side>_kernel_size_list`` with fairseq's defaults; one entry is repeated to every layer."""
        name = f"{side}_kernel_size_list"
        sizes = self.get(name, _DEFAULT_KERNEL_SIZES[family, side])
        if not isinstance(sizes, list | tuple) or not all(type(size) is int for size in sizes):
            raise ValueError(f"{self.path}: its saved arguments' {name} must be a list of ints, got {sizes!r}")
        layers = self.require(f"{side}_layers")
        # A layer count of another type is left to the configuration's check, which names it.
        return list(sizes) * layers if len(sizes) == 1 and type(layers) is int else list(sizes)

    def conv_dim(self, side: str) -> int:
        return self.get(f"{side}_conv_dim") or self.require(f"{side}_embed_dim")


def unsupported_features(checkpoint: FairseqCheckpoint, family: str) -> list[str]:
    """Each option of the checkpoint that talk_hf cannot reproduce, with its argument values."""
    args = _Arguments(checkpoint)
    language_model = is_language_model(checkpoint)
    problems = []
    if args.get("adaptive_softmax_cutoff"):
        problems.append(f"adaptive softmax (adaptive_softmax_cutoff={args.get('adaptive_softmax_cutoff')!r})")
    if args.get("adaptive_input"):
        problems.append("adaptive input embeddings (adaptive_input=True)")
    if args.get("character_embeddings"):
        problems.append("character embeddings (character_embeddings=True)")
    learned = [f"{side}_learned_pos=True" for side in ("encoder", "decoder") if args.get(f"{side}_learned_pos")]
    if learned:
        problems.append(f"learned positional embeddings ({', '.join(learned)})")
    if args.get("no_token_positional_embeddings"):
        problems.append("no positional embeddings (no_token_positional_embeddings=True)")
    if args.get("layernorm_embedding"):
        problems.append("a LayerNorm on the embeddings (layernorm_embedding=True)")
    width = args.require("decoder_embed_dim")
    for name in ("decoder_input_dim", "decoder_output_dim"):
        if args.get(name, width) != width:
            problems.append(
                f"a decoder {name.split('_')[1]} projection ({name}={args.get(name)} differs from "
                f"decoder_embed_dim={width})"
            )
    if family == "lightconv" and not args.get("weight_softmax", True):
        problems.append("kernels without softmax normalisation (weight_softmax=False)")
    if not language_model:
        problems += _encoder_decoder_mismatches(args, family)
    return problems


def _encoder_decoder_mismatches(args: _Arguments, family: str) -> list[str]:
    """Options talk_hf keeps once for both stacks but the checkpoint sets differently per stack."""
    per_stack = {
        "embed_dim": (args.require("encoder_embed_dim"), args.require("decoder_embed_dim")),
        "conv_dim": (args.conv_dim("encoder"), args.conv_dim("decoder")),
        "glu": (bool(args.get("encoder_glu", True)), bool(args.get("decoder_glu", True))),
    }
    if family == "lightconv":  # fairseq's argparse default is "dynamic"
        per_stack["conv_type"] = (args.get("encoder_conv_type", "dynamic"), args.get("decoder_conv_type", "dynamic"))
    problems = [
        f"different encoder and decoder {name} (encoder_{name}={encoder!r}, decoder_{name}={decoder!r})"
        for name, (encoder, decoder) in per_stack.items()
        if encoder != decoder
    ]
    even = [size for size in args.kernel_sizes("encoder", family) if size % 2 == 0]
    if family == "lightconv" and even:
        problems.append(
            f"even encoder kernel sizes ({even}: fairseq pads them with a (left, right) tuple that its "
            f"convolution modules reject, so such a checkpoint cannot run in fairseq either)"
        )
    return problems


def config_from_fairseq(
    checkpoint: FairseqCheckpoint, family: str, vocab_size: int, decoder_vocab_size: int
) -> PretrainedConfig:
    """The talk_hf configuration of ``checkpoint``.

    Args:
        checkpoint: the loaded fairseq checkpoint.
        family: ``"lightconv"`` or ``"talk"`` (:func:`detect_family`).
        vocab_size / decoder_vocab_size: rows of the source and target embeddings (the same for an LM).

    Raises:
        ValueError: naming the checkpoint and every option of it that talk_hf cannot reproduce, an
            argument the conversion needs that it lacks, one of the wrong type or value (as the
            configuration's checks name it), or parameters of the other family
            (:func:`check_parameters_family`).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    check_parameters_family(checkpoint, family)
    problems = unsupported_features(checkpoint, family)
    if problems:
        raise ValueError(
            f"{checkpoint.path} ({checkpoint.arch}) uses what talk_hf cannot reproduce: " + "; ".join(problems)
        )
    args = _Arguments(checkpoint)
    language_model = is_language_model(checkpoint)
    sizes_field = "kernel_sizes" if family == "lightconv" else "max_offsets"
    fields = dict(
        vocab_size=vocab_size,
        d_model=args.require("decoder_embed_dim"),
        conv_dim=args.conv_dim("decoder"),
        decoder_layers=args.require("decoder_layers"),
        decoder_ffn_dim=args.require("decoder_ffn_embed_dim"),
        decoder_conv_heads=args.require("decoder_attention_heads"),
        use_glu=bool(args.get("decoder_glu", True)),
        activation_function=_ACTIVATIONS[family],
        # fairseq's LMs are pre-norm without a final LayerNorm whatever the argument says.
        decoder_normalize_before=language_model or bool(args.get("decoder_normalize_before", False)),
        decoder_final_layer_norm=not language_model,
        position_offset=PAD_ID + 1,
        dropout=args.get("dropout", 0.1),
        activation_dropout=args.get("relu_dropout", 0.0),
        input_dropout=args.get("input_dropout", 0.0),
        scale_embedding=True,
        tie_word_embeddings=bool(args.get("share_decoder_input_output_embed") or args.get("share_all_embeddings")),
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        **{
            f"decoder_{sizes_field}": args.kernel_sizes("decoder", family),
            "weight_dropout" if family == "lightconv" else "offset_dropout": args.get(
                "weight_dropout", args.get("attention_dropout", 0.0)
            ),
        },
    )
    if family == "lightconv":
        fields["conv_type"] = canonical_conv_type(args.get("decoder_conv_type", "dynamic"))
    if not language_model:
        fields.update(
            encoder_layers=args.require("encoder_layers"),
            encoder_ffn_dim=args.require("encoder_ffn_embed_dim"),
            encoder_conv_heads=args.require("encoder_attention_heads"),
            decoder_attention_heads=args.require("decoder_attention_heads"),
            encoder_normalize_before=bool(args.get("encoder_normalize_before", False)),
            attention_dropout=args.get("attention_dropout", 0.0),
            share_encoder_decoder_embeddings=bool(args.get("share_all_embeddings", False)),
            decoder_vocab_size=decoder_vocab_size,
            decoder_start_token_id=EOS_ID,  # fairseq's decoder starts from </s>
            **{f"encoder_{sizes_field}": args.kernel_sizes("encoder", family)},
        )
    config_class = _CONFIG_CLASSES[family, language_model]
    try:
        return config_class(**fields)
    except (TypeError, ValueError) as error:  # the configuration's checks, naming its field
        raise ValueError(
            f"{checkpoint.path}: its saved arguments do not make a valid {config_class.__name__}: {error}"
        ) from error
