"""What a conversion may write into its output folder, checked before anything is written.

A conversion writes the files of `MODEL_FILES` (and of `FSMT_TOKENIZER_FILES` when it writes a
tokenizer).  Files of those names already in the folder are replaced only with ``overwrite``
(``--overwrite``): without it the conversion is refused, naming them.  Other tokenizer files
would stay beside the new model: beside the tokenizer the conversion writes they are refused; when
it writes none (``--no-tokenizer``, a language model, no BPE codes) their vocabulary sizes must be
the model's, and a tokenizer of another size, or one whose size cannot be read, is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

# What every conversion writes: the model card, the configuration, the search settings and the weights
# (one file, or shards and their index for a model beyond save_pretrained's shard size).
MODEL_FILES = (
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
)
MODEL_SHARDS = "model-*-of-*.safetensors"
# What the Moses + BPE tokenizer (fairseq_tokenizer.write_fsmt_tokenizer) writes.
FSMT_TOKENIZER_FILES = ("vocab-src.json", "vocab-tgt.json", "merges.txt", "tokenizer_config.json")
# Files that make a folder hold a transformers tokenizer.  The vocabulary files among them (JSON,
# ``{token: id}`` or, in tokenizer.json, under "model") give its size; vocab-tgt.json is the target's.
VOCABULARY_FILES = ("vocab-src.json", "vocab-tgt.json", "vocab.json", "tokenizer.json")
TOKENIZER_FILES = (
    *VOCABULARY_FILES,
    "tokenizer_config.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
)


def check_nothing_replaced(output_dir: Path, writes_tokenizer: bool, overwrite: bool) -> None:
    """Refuse, unless ``overwrite``, an ``output_dir`` that holds a file the conversion would replace.

    Raises:
        ValueError: naming those files and the option that replaces them.
    """
    if overwrite or not output_dir.is_dir():
        return
    names = (*MODEL_FILES, *(FSMT_TOKENIZER_FILES if writes_tokenizer else ()))
    existing = sorted(
        {name for name in names if (output_dir / name).exists()} | {path.name for path in output_dir.glob(MODEL_SHARDS)}
    )
    if existing:
        raise ValueError(
            f"{output_dir} already holds {', '.join(existing)}, which the conversion would replace: convert into "
            f"an empty or new folder, or pass --overwrite (overwrite=True) to replace them"
        )


def check_kept_tokenizer(output_dir: Path, writes_tokenizer: bool, source_vocab: int, target_vocab: int) -> None:
    """Refuse tokenizer files in ``output_dir`` that the conversion does not write and that would stay
    beside the model: any, when it writes a tokenizer (they would mix with it); else a vocabulary file
    whose size is not the model's ``source_vocab`` (``target_vocab`` for vocab-tgt.json), or tokenizer
    files without a vocabulary file to compare.

    Raises:
        ValueError: naming the tokenizer files (and both vocabulary sizes).
    """
    written = FSMT_TOKENIZER_FILES if writes_tokenizer else ()
    kept = [name for name in TOKENIZER_FILES if name not in written and (output_dir / name).is_file()]
    if not kept:
        return
    files, remedy = ", ".join(kept), f"remove them from {output_dir}, or convert into another folder"
    if writes_tokenizer:
        raise ValueError(
            f"{output_dir} holds tokenizer files ({files}) that the conversion's tokenizer "
            f"({', '.join(FSMT_TOKENIZER_FILES)}) does not replace and that would stay mixed with it: {remedy}"
        )
    remedy += " (with --no-tokenizer, for a language model or without BPE codes the conversion writes no tokenizer)"
    vocabularies = [name for name in kept if name in VOCABULARY_FILES]
    if not vocabularies:
        raise ValueError(
            f"{output_dir} holds tokenizer files ({files}) whose vocabulary size the conversion cannot read, so "
            f"it cannot tell whether they fit the model: {remedy}"
        )
    for name in vocabularies:
        size = vocabulary_size(output_dir / name)
        expected, side = (target_vocab, "target") if name == "vocab-tgt.json" else (source_vocab, "source")
        if size != expected:
            raise ValueError(
                f"{output_dir} holds another model's tokenizer ({files}): its {name} has a vocabulary of {size} "
                f"tokens, but the converted model's {side} vocabulary has {expected}; {remedy}"
            )


def vocabulary_size(path: Path) -> int:
    """Tokens of a JSON vocabulary: the largest id + 1 of ``{token: id}`` (tokenizer.json: its model's
    vocabulary, ``{token: id}`` or a list of ``[token, score]``, and its added tokens).

    Raises:
        ValueError: naming the file, when it is not such a vocabulary.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if path.name == "tokenizer.json":
            vocabulary, added = data["model"]["vocab"], data.get("added_tokens") or []
            ids = list(vocabulary.values()) if isinstance(vocabulary, dict) else list(range(len(vocabulary)))
            ids += [token["id"] for token in added]
        else:
            ids = list(data.values())
        return max((int(index) for index in ids), default=-1) + 1
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{path} is no readable tokenizer vocabulary ({type(error).__name__}: {error}); remove it or convert "
            f"into another folder"
        ) from None
