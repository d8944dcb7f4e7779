"""fairseq's dictionaries (``dict.<lang>.txt``): which file belongs to which side, and their symbols."""

from __future__ import annotations

from pathlib import Path

# fairseq's Dictionary starts with these four symbols: <s> = 0, <pad> = 1, </s> = 2, <unk> = 3.
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID = 1, 0, 2
# Ends a line that re-lists a symbol, which fairseq then adds again (Dictionary.add_from_file).
OVERWRITE_FLAG = " #fairseq:overwrite"


def read_dictionary(path: Path) -> list[str]:
    """The symbols of a ``dict.*.txt`` in id order: the four special symbols, then one per line.

    Each line is ``symbol count``, so a symbol's id is 4 + its line number, as in
    ``fairseq.data.Dictionary``.  As there, a symbol listed already (the special symbols included)
    is refused unless its line ends with ``#fairseq:overwrite``; such a line takes a new id as well,
    which fairseq maps the symbol's text to, while its special symbols keep ids 0-3.

    Raises:
        ValueError: naming ``path`` and the line, for a file that is not UTF-8, a line that is not
            ``symbol count [#fairseq:overwrite]`` or a symbol listed twice without the flag.
    """
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 ({error.reason} at byte {error.start}); fairseq writes and reads its "
            f"dictionaries as UTF-8, so this file is not one of its dictionaries as written"
        ) from error
    symbols = list(SPECIAL_SYMBOLS)
    listed = {symbol: "one of fairseq's special symbols, ids 0-3" for symbol in SPECIAL_SYMBOLS}
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.rstrip()
        overwrite = entry.endswith(OVERWRITE_FLAG)
        symbol, _, count = entry.removesuffix(OVERWRITE_FLAG).rpartition(" ")
        if not symbol or not count.isdigit():
            raise ValueError(f"{path}:{number}: expected 'symbol count', got {line!r}")
        if symbol in listed and not overwrite:
            raise ValueError(
                f"{path}:{number}: {symbol!r} is listed already ({listed[symbol]}); fairseq refuses "
                f"such a dictionary ('Duplicate word found when loading Dictionary') unless the line ends "
                f"with{OVERWRITE_FLAG}"
            )
        listed.setdefault(symbol, f"on line {number}")
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
