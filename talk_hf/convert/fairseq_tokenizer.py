"""The original preprocessing as a transformers tokenizer: Moses tokenization, then BPE with the
released ``bpecodes`` (subword-nmt), then fairseq's dictionary ids and a final ``</s>``.

transformers' ``FSMTTokenizer`` (written for fairseq's WMT19 models) does exactly this with
``sacremoses``; this module only rewrites fairseq's files into its format:

* vocabulary: subword-nmt marks a piece that *continues* a word (``le@@ tt@@ er``), FSMT marks the
  piece that *ends* one (``le tt er</w>``): ``x@@`` becomes ``x`` and ``x`` becomes ``x</w>``; the
  special symbols stay.  Ids are fairseq's.
* merges: the codes without the ``#version`` header and without frequency counts; for a merge
  listed twice, the first (as subword-nmt ranks it).  FSMT applies merges the way subword-nmt's
  codes version 0.2 does (the end-of-word mark glued to a word's last character), so other
  versions are refused.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from transformers import FSMTTokenizer

from .fairseq_dictionary import SPECIAL_SYMBOLS

BPE_CONTINUATION = "@@"
CODES_VERSION = "#version: 0.2"


def fsmt_vocabulary(symbols: list[str]) -> dict[str, int]:
    """fairseq symbols in id order -> FSMT's {token: id} (see the module docstring)."""
    vocabulary = {}
    for index, symbol in enumerate(symbols):
        if symbol in SPECIAL_SYMBOLS:
            # fairseq's bos/pad/eos/unk ids stay 0-3 when a line re-lists the symbol (#fairseq:overwrite):
            # unknown words still map to 3, so the tokenizer's special tokens keep them too.
            vocabulary.setdefault(symbol, index)
            continue
        token = symbol[: -len(BPE_CONTINUATION)] if symbol.endswith(BPE_CONTINUATION) else symbol + "</w>"
        vocabulary[token] = index  # a word re-listed (#fairseq:overwrite) takes its last id, as in fairseq's Dictionary
    return vocabulary


def fsmt_merges(bpecodes: Path) -> str:
    """subword-nmt codes -> FSMT's ``merges.txt`` text, one ``left right`` pair a line, by rank.

    Raises:
        ValueError: the codes are not subword-nmt's version 0.2, or a line is not a pair.
    """
    lines = bpecodes.read_text(encoding="utf-8").rstrip("\n").split("\n")
    if lines[0].strip() != CODES_VERSION:
        raise ValueError(
            f"{bpecodes} does not start with {CODES_VERSION!r} (got {lines[0]!r}); FSMTTokenizer applies "
            f"BPE as subword-nmt's codes version 0.2 do, so it would not reproduce these codes. Convert "
            f"with --no-tokenizer and apply them with subword-nmt"
        )
    merges = {}
    for number, line in enumerate(lines[1:], start=2):
        pair = tuple(re.sub(r" \d+$", "", line.strip()).split(" "))
        if len(pair) != 2:
            raise ValueError(f"{bpecodes}:{number}: expected a merge 'left right', got {line!r}")
        merges.setdefault(pair, len(merges))
    return "".join(f"{left} {right}\n" for left, right in merges)


def write_fsmt_tokenizer(
    output_dir: Path,
    source_symbols: list[str],
    target_symbols: list[str],
    bpecodes: Path,
    langs: tuple[str, str],
    lowercase: bool,
    model_max_length: int,
) -> None:
    """Write an ``FSMTTokenizer`` into ``output_dir`` (its files and ``tokenizer_config.json``).

    Args:
        source_symbols / target_symbols: the dictionaries' symbols in id order.
        bpecodes: the subword-nmt codes released with the model.
        langs: (source, target) language codes; Moses rules follow the source's.
        lowercase: lowercase the input first (IWSLT14 was lowercased before BPE).
        model_max_length: the model's maximum source length (fairseq's ``max_source_positions``).

    Raises:
        ImportError: ``sacremoses`` is not installed.
        ValueError: the codes cannot be reproduced (see :func:`fsmt_merges`); nothing is written then.
    """
    if importlib.util.find_spec("sacremoses") is None:
        raise ImportError(
            "the Moses tokenizer needs sacremoses: pip install sacremoses (or, in the talk_hf clone, "
            "pip install -e '.[convert]'), or convert with --no-tokenizer"
        )
    merges = fsmt_merges(bpecodes)
    files = {"src_vocab_file": "vocab-src.json", "tgt_vocab_file": "vocab-tgt.json", "merges_file": "merges.txt"}
    paths = {key: output_dir / name for key, name in files.items()}
    output_dir.mkdir(parents=True, exist_ok=True)
    for key, symbols in (("src_vocab_file", source_symbols), ("tgt_vocab_file", target_symbols)):
        paths[key].write_text(
            json.dumps(fsmt_vocabulary(symbols), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
    paths["merges_file"].write_text(merges, encoding="utf-8")
    tokenizer = FSMTTokenizer(
        langs=list(langs),
        do_lower_case=lowercase,
        model_max_length=model_max_length,
        **{key: str(path) for key, path in paths.items()},
    )
    tokenizer.save_pretrained(output_dir)  # adds tokenizer_config.json
