"""fairseq's dictionaries (``dict.<lang>.txt``): which file belongs to which side, and their symbols."""

from __future__ import annotations

from pathlib import Path

# fairseq's Dictionary starts with these four symbols: <s> = 0, <pad> = 1, </s> = 2, <unk> = 3.
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID = 1, 0, 2


def read_dictionary(path: Path) -> list[str]:
    """The symbols of a ``dict.*.txt`` in id order: the four special symbols, then one per line.

    Each line is ``symbol count`` (``symbol count #fairseq:overwrite`` re-adds a symbol that exists
    already), so a symbol's id is 4 + its line number, as in ``fairseq.data.Dictionary``.
    """
    symbols = list(SPECIAL_SYMBOLS)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        entry = line.rstrip().removesuffix(" #fairseq:overwrite")
        symbol, _, count = entry.rpartition(" ")
        if not symbol or not count.isdigit():
            raise ValueError(f"{path}:{number}: expected 'symbol count', got {line!r}")
        symbols.append(symbol)
    return symbols


def dictionary_paths(
    folder: Path, source_lang: str | None, target_lang: str | None, language_model: bool
) -> tuple[Path, Path]:
    """(source, target) dictionary files beside the checkpoint; the same file twice for an LM.

    Raises:
        ValueError: a file is missing, or the language pair is unknown and the folder does not
            settle it (pass ``--source-lang`` / ``--target-lang``).
    """
    if language_model:
        paths = (folder / "dict.txt",) * 2
    else:
        if source_lang is None or target_lang is None:
            found = sorted(path.name for path in folder.glob("dict.*.txt"))
            raise ValueError(
                f"the checkpoint does not name its language pair; pass --source-lang and --target-lang "
                f"(dictionaries in {folder}: {found})"
            )
        paths = (folder / f"dict.{source_lang}.txt", folder / f"dict.{target_lang}.txt")
    for path in paths:
        if not path.is_file():
            raise ValueError(
                f"{path} is missing: fairseq's dictionaries must lie beside the checkpoint, as in the released archives"
            )
    return paths
