"""Convert a fairseq LightConv/DynamicConv or TaLK checkpoint into a talk_hf ``save_pretrained`` folder.

    convert_fairseq_checkpoint("wmt16.en-de.joined-dict.dynamicconv-glu/model.pt", "dynamicconv-wmt16-en-de")

The checkpoint's folder must hold what fairseq's archives hold beside ``model.pt``: the dictionaries
(``dict.<lang>.txt``, or ``dict.txt`` for a language model) and, for a tokenizer, the BPE codes
(``bpecodes``).  The output folder gets the model (safetensors, ``config.json``), fairseq's search
settings (``generation_config.json``), a Moses + BPE tokenizer when the codes are there, and a model
card with the source and the license.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import GenerationConfig, PretrainedConfig

from ..models.families import family_of
from .fairseq_checkpoint import FairseqCheckpoint, load_fairseq_checkpoint
from .fairseq_config import config_from_fairseq, detect_family, is_language_model
from .fairseq_dictionary import BOS_ID, EOS_ID, PAD_ID, dictionary_paths, read_dictionary
from .fairseq_tokenizer import write_fsmt_tokenizer
from .fairseq_weights import convert_state_dict, load_converted
from .model_card import model_card
from .output_folder import check_kept_tokenizer, check_nothing_replaced

logger = logging.getLogger(__name__)

# fairseq-generate's default --max-len-b: at most 200 tokens before the final </s>.
MAX_LEN_B = 200
# Older fairseq archives call the BPE codes "code".
BPE_CODES_NAMES = ("bpecodes", "code")


def fairseq_generation_config(seq2seq: bool, num_beams: int, length_penalty: float) -> GenerationConfig:
    """fairseq's ``SequenceGenerator`` defaults in transformers' terms.

    fairseq starts the decoder (an LM too) with ``</s>``, bans ``<pad>`` always and ``</s>`` at the first step
    (``min_len`` 1), allows only ``</s>`` at step ``max_len`` and stops a beam search once
    ``num_beams`` hypotheses are finished (``early_stopping``).  ``max_length`` counts the start token.
    """
    beam_settings = dict(length_penalty=length_penalty, early_stopping=True) if num_beams > 1 else {}
    return GenerationConfig(
        num_beams=num_beams,
        max_length=MAX_LEN_B + 2,
        min_length=2,
        forced_eos_token_id=EOS_ID,
        suppress_tokens=[PAD_ID],
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        # fairseq's decoders read </s> first: a translation starts from it, an LM without a prompt too.
        **({"bos_token_id": BOS_ID, "decoder_start_token_id": EOS_ID} if seq2seq else {"bos_token_id": EOS_ID}),
        **beam_settings,
    )


def _check_dictionary_size(checkpoint: FairseqCheckpoint, dictionary: Path, symbols: list[str], key: str) -> None:
    """The embedding ``key`` has one row per symbol of ``dictionary``."""
    rows = checkpoint.state_dict[key].shape[0] if key in checkpoint.state_dict else None
    if rows != len(symbols):
        raise ValueError(
            f"{dictionary} has {len(symbols)} symbols but the checkpoint's {key} has {rows} rows: "
            f"these are not the model's dictionaries"
        )


def _bpe_codes(checkpoint: FairseqCheckpoint) -> Path | None:
    """The BPE codes beside the checkpoint, or None."""
    folder = checkpoint.path.parent
    return next((folder / name for name in BPE_CODES_NAMES if (folder / name).is_file()), None)


def _write_tokenizer(
    checkpoint: FairseqCheckpoint,
    output_dir: Path,
    symbols: tuple[list[str], list[str]],
    langs: tuple[str, str],
    lowercase: bool,
) -> str:
    """Write the Moses + BPE tokenizer when the codes lie beside the checkpoint; say what was done."""
    codes = _bpe_codes(checkpoint)
    if codes is None:
        return (
            f"No tokenizer: no BPE codes ({' or '.join(BPE_CODES_NAMES)}) lay beside the checkpoint; inputs are "
            f"fairseq dictionary ids (Moses-tokenized, BPE-segmented text)."
        )
    max_length = getattr(checkpoint.args, "max_source_positions", 1024)
    write_fsmt_tokenizer(output_dir, *symbols, codes, langs, lowercase, max_length)
    return (
        f"The tokenizer (`FSMTTokenizer`: Moses{', lowercased' if lowercase else ''}, then BPE with the released "
        f"`{codes.name}`, then `</s>`) reproduces fairseq's preprocessing."
    )


def convert_fairseq_checkpoint(
    checkpoint_path: str | Path,
    output_dir: str | Path,
    *,
    family: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    num_beams: int = 5,
    length_penalty: float = 1.0,
    lowercase: bool = False,
    tokenizer: bool = True,
    dtype: torch.dtype = torch.float32,
    allow_globals: tuple = (),
    overwrite: bool = False,
) -> PretrainedConfig:
    """Convert ``checkpoint_path`` (a fairseq ``model.pt``) into ``output_dir``.

    Args:
        family: ``"lightconv"`` (fairseq's LightConv/DynamicConv) or ``"talk"`` (the TaLK authors'
            plugin); None detects it from the saved ``arch``.
        source_lang / target_lang: which ``dict.<lang>.txt`` is which; None reads the checkpoint's.
        num_beams / length_penalty: the search the model card and generation config prescribe
            (fairseq-generate's ``--beam`` and ``--lenpen``).
        lowercase: the tokenizer lowercases its input (the IWSLT14 models were trained lowercased).
        tokenizer: write the tokenizer when BPE codes are present (needs ``sacremoses``).
        dtype: the dtype of the saved weights.
        allow_globals: further classes the unpickler may build (see ``load_fairseq_checkpoint``).
        overwrite: replace the files of the conversion (``output_folder.MODEL_FILES``, and the tokenizer's
            when one is written) that ``output_dir`` already holds; without it they are refused.

    Returns:
        The configuration of the converted model.

    Raises:
        ValueError: naming the file, for a ``checkpoint_path`` that is no readable fairseq checkpoint, an
            ``output_dir`` that is a file or holds files the conversion would replace (without ``overwrite``)
            or another model's tokenizer, anything talk_hf cannot reproduce or files that do not fit each other.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"{output_dir} is a file: the output must be a folder (created if missing)")
    checkpoint = load_fairseq_checkpoint(checkpoint_path, allow_globals)
    family = family or detect_family(checkpoint)
    language_model = is_language_model(checkpoint)
    langs = (source_lang or checkpoint.source_lang, target_lang or checkpoint.target_lang)
    paths = dictionary_paths(checkpoint.path.parent, *langs, language_model)
    symbols = (read_dictionary(paths[0]), read_dictionary(paths[1]))
    embeddings = ("decoder", "decoder") if language_model else ("encoder", "decoder")
    for path, side_symbols, stack in zip(paths, symbols, embeddings, strict=True):
        _check_dictionary_size(checkpoint, path, side_symbols, f"{stack}.embed_tokens.weight")

    config = config_from_fairseq(checkpoint, family, len(symbols[0]), len(symbols[1]))
    writes_tokenizer = tokenizer and not language_model and _bpe_codes(checkpoint) is not None
    check_nothing_replaced(output_dir, writes_tokenizer, overwrite)
    check_kept_tokenizer(output_dir, writes_tokenizer, len(symbols[0]), len(symbols[1]))
    head_class = family_of(config.model_type)[2]  # (config, base model, head, Auto class of the head)
    model = head_class(config)
    load_converted(model, convert_state_dict(checkpoint.state_dict, config.tie_word_embeddings))
    model.generation_config = fairseq_generation_config(not language_model, num_beams, length_penalty)

    # The tokenizer before the weights: it can still fail (no sacremoses, codes of another format).
    if language_model:
        tokenizer_note = "No tokenizer: FSMTTokenizer is a translation tokenizer; inputs are dict.txt ids."
    elif not tokenizer:
        tokenizer_note = "No tokenizer (converted with --no-tokenizer): inputs are fairseq dictionary ids."
    else:
        tokenizer_note = _write_tokenizer(checkpoint, output_dir, symbols, langs, lowercase)
    logger.info(tokenizer_note)
    model.to(dtype).save_pretrained(output_dir)
    card = model_card(
        checkpoint.path.parent.name,
        output_dir.name,
        checkpoint.arch,
        family,
        config,
        model.generation_config,
        tokenizer_note,
    )
    (output_dir / "README.md").write_text(card, encoding="utf-8")
    return config
