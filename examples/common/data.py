"""Read one split of a text dataset as columns of strings.

A dataset `location` is one of

* a folder written by `datasets.Dataset(Dict).save_to_disk` (it holds `dataset_dict.json`);
* a folder of line-aligned text files, plain or gzip: `{split}.{column}` (for example
  `train.de.gz` and `train.en.gz`), where the column `text` is stored as `{split}.txt`;
* a folder of JSON lines files `{split}.jsonl` (or `.jsonl.gz`), one record per line;
* otherwise, a dataset name on the HuggingFace Hub (`bentrevett/multi30k`,
  `Salesforce/wikitext` with config `wikitext-2-v1`).

Records may hold the columns directly (`{"de": ..., "en": ...}`, `{"text": ...}`) or, like
transformers' translation datasets, under `translation` (`{"translation": {"de": ..., "en": ...}}`).

Data that cannot be read, an empty split and a column without text raise `DataError`, whose message
names the file (and line) or record; `load_splits` turns it into the scripts' error naming the option.

Split names are matched loosely, because every dataset spells them differently: an exact name
wins, otherwise the one split whose name starts with the asked name or is a prefix of it
(`validation` finds `val` and `valid`, `test` finds `test_2016_flickr`).
"""

import gzip
import json
import zlib
from pathlib import Path

from .messages import fail

TEXT_SUFFIX = {"text": "txt"}  # the column `text` lives in `{split}.txt`
_MISSING = object()  # what `_column` finds for a column that a record lacks


class DataError(ValueError):
    """A data location, file or record that is no readable split of text. The message names it (the
    file and line where there is one) and what was expected; the scripts show it as their error."""


def read_lines(path):
    """All lines of a UTF-8 text file, gzip when its name ends in `.gz`, without their `\\n` (split on
    `\\n` only, never on U+2028).

    Raises DataError naming the file: the line and byte offset of bytes that are not UTF-8, or that a
    `.gz` file is not gzip at all or is truncated or damaged.
    """
    path = Path(path)
    compressed = path.suffix == ".gz"
    lines, offset = [], 0  # offset: of the line in the (decompressed) bytes
    try:
        with gzip.open(path, "rb") if compressed else open(path, "rb") as f:
            for raw in f:  # binary lines end at b"\n" only
                lines.append(_decode_line(raw, path, len(lines) + 1, offset))
                offset += len(raw)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:  # only gzip raises these here
        raise DataError(_gzip_problem(path, error, len(lines))) from error
    return lines


def _decode_line(raw, path, number, offset):
    """Line `number` of `path`, whose bytes `raw` start at byte `offset`, as text without its `\\n`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        after = " after decompression" if path.suffix == ".gz" else ""
        raise DataError(
            f"{path}: line {number} is not UTF-8 text (byte {raw[error.start]:#04x} at byte offset "
            f"{offset + error.start}{after}: {error.reason}): convert the file to UTF-8"
        ) from None
    return text[:-1] if text.endswith("\n") else text


def _gzip_problem(path, error, lines_read):
    """What is wrong with the `.gz` file `path` that raised `error` after `lines_read` whole lines."""
    if isinstance(error, gzip.BadGzipFile) and lines_read == 0 and str(error).startswith("Not a gzipped file"):
        return f"{path} is not gzip data although its name ends in .gz: if it is plain text, drop .gz from its name"
    if isinstance(error, EOFError):
        return (
            f"{path} is truncated: its gzip data ends early, after {lines_read} complete lines (an interrupted "
            "copy or download?): get the whole file again"
        )
    return f"{path} is damaged gzip data after {lines_read} complete lines ({error}): get the file again"


def match_split(wanted, available, where):
    """The name in `available` that `wanted` refers to (exact, else the one prefix match)."""
    available = sorted(set(available))
    if wanted in available:
        return wanted
    matches = [s for s in available if s.startswith(wanted) or wanted.startswith(s)]
    if len(matches) != 1:
        raise DataError(f"split {wanted!r} matches {matches or 'nothing'} in {where} (splits: {available})")
    return matches[0]


def _local_file(folder, split, suffix):
    """`folder/{split}.{suffix}` or its `.gz`, whichever is there (None: neither); both is a DataError."""
    found = [folder / name for name in (f"{split}.{suffix}", f"{split}.{suffix}.gz") if (folder / name).is_file()]
    if len(found) > 1:
        raise DataError(_two_sources(split, found))
    return found[0] if found else None


def _two_sources(split, paths):
    """Why a split found in each of `paths` cannot be read: which one holds the data is not known."""
    return (
        f"split {split!r} is in {' and in '.join(map(str, paths))}: one of them would be read and the other "
        "ignored. Keep one source of the split in the folder (move or rename the others)"
    )


def _local_splits(folder):
    """The split names of the files of `folder`; hidden files (`.lock`, `.DS_Store`) are none."""
    return {
        p.name.split(".")[0] for p in folder.iterdir() if p.is_file() and "." in p.name and not p.name.startswith(".")
    }


def _read_local(folder, split, columns):
    """(records, where) of one split from text or JSON lines files in `folder`; `where` names the files."""
    split = match_split(split, _local_splits(folder), folder)
    jsonl = _local_file(folder, split, "jsonl")
    files = {c: _local_file(folder, split, TEXT_SUFFIX.get(c, c)) for c in columns}
    if jsonl is not None:
        present = [path for path in files.values() if path is not None]
        if present:
            raise DataError(_two_sources(split, [jsonl, " and ".join(map(str, present))]))
        return read_jsonl(jsonl, columns), str(jsonl)
    missing = [f"{split}.{TEXT_SUFFIX.get(c, c)}[.gz]" for c, path in files.items() if path is None]
    if missing:
        raise DataError(f"{folder} has no {' or '.join(missing)} (nor {split}.jsonl)")
    lines = {c: read_lines(path) for c, path in files.items()}
    counts = {c: len(v) for c, v in lines.items()}
    if len(set(counts.values())) != 1:
        raise DataError(f"line-aligned files of split {split!r} in {folder} differ in length: {counts}")
    records = [dict(zip(lines, row, strict=True)) for row in zip(*lines.values(), strict=True)]
    return records, " and ".join(str(path) for path in files.values())


def read_jsonl(path, columns):
    """The records of a JSON lines file (blank lines skipped), each checked to hold `columns`."""
    records = []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: line {number} is not JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {number} is a JSON {type(record).__name__}, not an object of columns")
        for column in columns:
            _column(record, column, f"{path}: line {number}")
        records.append(record)
    return records


def _read_saved(folder, split):
    """(records, where) of one split from a folder written by `save_to_disk`."""
    import datasets

    dataset = datasets.load_from_disk(str(folder))
    if isinstance(dataset, datasets.Dataset):
        return dataset, str(folder)
    name = match_split(split, dataset.keys(), folder)
    return dataset[name], f"split {name!r} of {folder}"


def _read_hub(name, split, config):
    """(records, where) of one split of a Hub dataset (needs the network or the local datasets cache)."""
    import datasets

    try:
        split_names = datasets.get_dataset_split_names(name, config)
    except Exception as error:  # offline, unknown name, ...: say both readings of `name`
        raise DataError(f"{name!r} is not a local folder, and as a Hub dataset: {error}") from error
    found = match_split(split, split_names, name)
    return datasets.load_dataset(name, config, split=found), f"split {found!r} of the Hub dataset {name}"


def _is_hub_name(location):
    """`owner/name` or `name`: not a path that was meant to exist locally."""
    text = str(location)
    return text.count("/") <= 1 and not text.startswith((".", "/", "~")) and not text.endswith("/")


def _column(record, column, where, index=None):
    """The text of `column` in `record` (flat or under `translation`); `where` (and `index`, the
    record's number there) name the record in errors."""
    nested = record.get("translation")
    if column in record:
        value = record[column]
    elif isinstance(nested, dict) and column in nested:
        value = nested[column]
    else:
        value = _MISSING
    if isinstance(value, str):
        return value
    where = where if index is None else f"{where}: record {index}"
    if value is _MISSING:
        raise DataError(f"{where} has no column {column!r} (its keys: {sorted(record)})")
    raise DataError(f"{where}: column {column!r} holds {type(value).__name__} {value!r:.40}, not text")


def split_name(location, split, config=None):
    """The name of the split that `split` finds in `location` (`test` -> `test_2016_flickr`), as
    `load_columns` reads it."""
    folder = Path(location)
    if (folder / "dataset_dict.json").is_file():
        splits = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        return match_split(split, splits, folder)
    if (folder / "dataset_info.json").is_file():  # a single saved split: no names to match
        return split
    if folder.is_dir():
        return match_split(split, _local_splits(folder), folder)
    import datasets

    return match_split(split, datasets.get_dataset_split_names(str(location), config), location)


def load_columns(location, split, columns, config=None, limit=None):
    """Read `columns` (a list of names) of one split as {column: [str, ...]}, aligned by index.

    `limit` keeps only the first `limit` records (tiny slices for tests and quick runs). Raises
    DataError naming the file, line or record for data that cannot be read, and for a split without
    records or a column whose every text is blank (empty or spaces): no script can train or
    evaluate on those.
    """
    folder = Path(location)
    if (folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file():
        records, where = _read_saved(folder, split)
    elif folder.is_dir():
        records, where = _read_local(folder, split, columns)
    elif _is_hub_name(location):
        records, where = _read_hub(str(location), split, config)
    else:
        raise DataError(f"{location} is neither a data folder nor a Hub dataset name")
    return columns_of(records, columns, where, limit)


def columns_of(records, columns, where, limit=None):
    """`columns` of `records` (dicts, or a `datasets.Dataset`) as {column: [str, ...]}, the first `limit`
    records only when it is given; `where` names the records in errors. Raises DataError for a record
    without a column's text, no records, or a column blank in every record (see `load_columns`)."""
    if limit is not None:
        records = records.select(range(min(limit, len(records)))) if hasattr(records, "select") else records[:limit]
    if len(records) == 0:
        raise DataError(f"{where}: no records, the split is empty")
    table = {c: [_column(r, c, where, i) for i, r in enumerate(records)] for c in columns}
    for column, texts in table.items():
        if not any(text.strip() for text in texts):
            raise DataError(f"{where}: column {column!r} is blank (empty or spaces) in all {len(texts)} records")
    return table


def load_splits(args, columns):
    """The `columns` of the splits a training script uses, each {column: [str, ...]}, under the keys
    "train", "validation" and "test" (None when `--test_split` is ''): the splits that
    `--{key}_split` names, in `--data_dir` or the Hub's `--dataset_name`/`--dataset_config`, the
    training split cut to `--max_train_samples` and the others to `--max_eval_samples`.

    The scripts call it before they write anything: a split that cannot be read or holds no text
    stops the script with an error that names the option and the file (`load_columns`), and the
    run folder stays as it was.
    """
    location = args.data_dir or args.dataset_name
    splits = {}
    for key in ("train", "validation", "test"):
        split = getattr(args, f"{key}_split")
        limit = args.max_train_samples if key == "train" else args.max_eval_samples
        if key == "test" and not split:
            splits[key] = None
            continue
        try:
            splits[key] = load_columns(location, split, columns, args.dataset_config, limit)
        except DataError as error:
            fail(f"--{key}_split {split}: {error}")
    return splits
