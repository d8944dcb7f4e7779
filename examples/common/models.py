"""`build_model`: a freshly initialised model of any `--model_type`, for translation or LM.

Our models are those of the families registered with `talk_hf.register_family`, under the names
`talk_hf.models.families.script_model_types` gives them (a family's name, or its variants' names:
`light_conv` is DynamicConv with `conv_type="light_conv"`). They start from a named preset of their
configuration (`XConfig.from_preset`), with the size flags overriding the fields of their names.
The `transformer` baseline is built from transformers' own classes (MarianMT for translation:
post-norm, sinusoidal positions, like the papers' Transformer; GPT-2 for LM) with the sizes read
off the TaLK configuration of the same preset and flags, so that a baseline and our models
compared by one script always have the same width, depth and heads.
"""

import dataclasses

from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, GPT2Config, MarianConfig

from talk_hf import MODEL_FAMILIES
from talk_hf.models.families import script_model_types

BASELINE = "transformer"  # transformers' own Marian / GPT-2, as large as TaLK


def model_types(encoder_decoder):
    """The `--model_type` choices of a translation (True) or language-modelling (False) script: the
    registered families' (`script_model_types`) that have that form, then the baseline."""
    ours = [name for name, forms in script_model_types().items() if forms.config_class(encoder_decoder) is not None]
    return (*ours, BASELINE)


def _config_class(model_type, encoder_decoder):
    """talk_hf's configuration class of our `model_type`, encoder-decoder or decoder-only."""
    return script_model_types()[model_type].config_class(encoder_decoder)


def presets_of(model_type, encoder_decoder):
    """The `--preset` names of `model_type` (the baseline takes TaLK's sizes, so TaLK's presets)."""
    config_class = _config_class("talk" if model_type == BASELINE else model_type, encoder_decoder)
    return tuple(sorted(config_class.presets))


def is_ours(config):
    """Whether `config` is of one of talk_hf's model types (the baselines are transformers' own)."""
    return any(config.model_type == family[0].model_type for family in MODEL_FAMILIES)


def _size_fields(
    model_type,
    encoder_decoder,
    d_model=None,
    ffn_dim=None,
    encoder_layers=None,
    decoder_layers=None,
    heads=None,
    dropout=None,
):
    """Config fields for the size flags that were given (None leaves the preset's value).

    A flag sets the fields of its name in every stack; one whose fields the configuration lacks
    (SliceNet's: no feed-forward blocks, one attention head) raises ValueError.
    """
    config_class = _config_class(model_type, encoder_decoder)
    stacks = ("encoder", "decoder") if encoder_decoder else ("decoder",)
    heads_fields = [f"{stack}_conv_heads" for stack in stacks]
    if encoder_decoder:
        heads_fields.append("decoder_attention_heads")  # the cross-attention's
    flags = {  # flag: (its value, the fields it sets)
        "d_model": (d_model, ["d_model"]),
        "ffn_dim": (ffn_dim, [f"{stack}_ffn_dim" for stack in stacks]),
        "encoder_layers": (encoder_layers, ["encoder_layers"]),
        "decoder_layers": (decoder_layers, ["decoder_layers"]),
        "heads": (heads, heads_fields),
        "dropout": (dropout, ["dropout"]),
    }
    declared = {field.name for field in dataclasses.fields(config_class)}
    given = {flag: (value, fields) for flag, (value, fields) in flags.items() if value is not None}
    inapplicable = {flag: fields for flag, (_, fields) in given.items() if not declared.issuperset(fields)}
    if inapplicable:
        lacking = sorted({field for fields in inapplicable.values() for field in fields} - declared)
        raise ValueError(
            f"{' and '.join(f'--{flag}' for flag in inapplicable)} do not apply to {model_type} "
            f"(its configuration has no {', '.join(lacking)})"
        )
    fields = {field: value for value, names in given.values() for field in names}
    family = getattr(config_class, "family", None)  # a MixerFamily: per-layer sizes, one per layer
    for stack in stacks:
        if family is not None and f"{stack}_layers" in fields:  # the preset's per-layer list no longer fits
            fields[family.sizes_field(stack)] = None  # the family's default schedule
    return fields


def our_config(model_type, tokenizer, encoder_decoder, preset="small", **sizes):
    """The configuration of one of our models: `preset` updated with the given sizes and token ids."""
    config_class = _config_class(model_type, encoder_decoder)
    ids = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    if encoder_decoder:
        ids["decoder_start_token_id"] = tokenizer.eos_token_id  # like fairseq and BART
    fields = {**_size_fields(model_type, encoder_decoder, **sizes), **script_model_types()[model_type].fields, **ids}
    return config_class.from_preset(preset, **fields)


def transformer_config(
    encoder_decoder,
    *,
    vocab_size,
    d_model,
    heads,
    layers,
    ffn_dim,
    max_positions,
    encoder_layers=None,
    encoder_ffn_dim=None,
    **fields,
):
    """A Marian (``encoder_decoder``) or GPT-2 configuration of the given sizes: the one place that
    maps sizes onto transformers' field names (the example scripts' and the benchmarks' baselines).

    layers, ffn_dim: the decoder's depth and FFN size (GPT-2's); encoder_layers, encoder_ffn_dim:
    Marian's encoder's (None: the decoder's). heads: every attention's; max_positions: the length of
    the position table.
    fields: further configuration fields (token ids, dropout), set last.
    """
    if encoder_decoder:
        sizes = dict(
            vocab_size=vocab_size,
            decoder_vocab_size=vocab_size,
            d_model=d_model,
            encoder_layers=layers if encoder_layers is None else encoder_layers,
            decoder_layers=layers,
            encoder_attention_heads=heads,
            decoder_attention_heads=heads,
            encoder_ffn_dim=ffn_dim if encoder_ffn_dim is None else encoder_ffn_dim,
            decoder_ffn_dim=ffn_dim,
            max_position_embeddings=max_positions,
        )
        return MarianConfig(**{**sizes, **fields})
    if encoder_layers is not None or encoder_ffn_dim is not None:
        raise ValueError(
            f"encoder_layers={encoder_layers}, encoder_ffn_dim={encoder_ffn_dim} given for GPT-2, which has no "
            "encoder: leave them None"
        )
    sizes = dict(
        vocab_size=vocab_size, n_positions=max_positions, n_embd=d_model, n_layer=layers, n_head=heads, n_inner=ffn_dim
    )
    return GPT2Config(**{**sizes, **fields})


def baseline_config(tokenizer, encoder_decoder, preset="small", max_positions=1024, **sizes):
    """A Marian (translation) or GPT-2 (LM) configuration as large as our TaLK model would be."""
    size = our_config("talk", tokenizer, encoder_decoder, preset, **sizes)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    shared = dict(vocab_size=len(tokenizer), d_model=size.d_model, max_positions=max_positions)
    if encoder_decoder:
        return transformer_config(
            True,
            **shared,
            heads=size.decoder_attention_heads,
            layers=size.decoder_layers,
            encoder_layers=size.encoder_layers,
            ffn_dim=size.decoder_ffn_dim,
            encoder_ffn_dim=size.encoder_ffn_dim,
            dropout=size.dropout,
            scale_embedding=True,
            share_encoder_decoder_embeddings=True,
            tie_word_embeddings=True,
            pad_token_id=pad,
            eos_token_id=eos,
            bos_token_id=size.bos_token_id,
            decoder_start_token_id=eos,
            forced_eos_token_id=eos,
        )
    return transformer_config(
        False,
        **shared,
        heads=size.decoder_conv_heads,
        layers=size.decoder_layers,
        ffn_dim=size.decoder_ffn_dim,
        resid_pdrop=size.dropout,
        embd_pdrop=size.dropout,
        attn_pdrop=size.dropout,
        bos_token_id=size.bos_token_id,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=True,
    )


def build_config(model_type, tokenizer, encoder_decoder, preset="small", max_positions=1024, **sizes):
    """The configuration of the model `build_model` builds (see there for the arguments).

    Raises ValueError when the sizes make no valid configuration of `model_type`.
    """
    if model_type not in model_types(encoder_decoder):
        raise ValueError(f"model_type must be one of {model_types(encoder_decoder)}, not {model_type!r}")
    if model_type == BASELINE:
        return baseline_config(tokenizer, encoder_decoder, preset, max_positions, **sizes)
    return our_config(model_type, tokenizer, encoder_decoder, preset, **sizes)


def build_model(
    model_type, tokenizer, encoder_decoder, preset="small", max_positions=1024, config_overrides=None, **sizes
):
    """A randomly initialised model.

    Args:
        model_type: one of `model_types(encoder_decoder)`: a registered family's or the baseline.
        tokenizer: gives the vocabulary size and the special token ids.
        encoder_decoder: True for translation (`AutoModelForSeq2SeqLM`), False for a causal LM.
        preset: the name of our configurations' preset that sets the sizes (`small` fits a CPU).
        max_positions: longest sequence of the baseline (its position table); ours have none.
        config_overrides: ``"field=value,..."`` set on the configuration last (transformers'
            ``PretrainedConfig.update_from_string``: the fields must exist; values take their type),
            then checked as a new configuration; None or "" for none.
        sizes: d_model, ffn_dim, encoder_layers, decoder_layers, heads, dropout; None keeps the preset's.
    """
    config = build_config(model_type, tokenizer, encoder_decoder, preset, max_positions, **sizes)
    if config_overrides:
        config.update_from_string(config_overrides)
        config = type(config).from_dict(config.to_dict())  # our configurations check their fields on creation
    auto_class = AutoModelForSeq2SeqLM if encoder_decoder else AutoModelForCausalLM
    return auto_class.from_config(config)
