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

Split names are matched loosely, because every dataset spells them differently: an exact name
wins, otherwise the one split whose name starts with the asked name or is a prefix of it
(`validation` finds `val` and `valid`, `test` finds `test_2016_flickr`).
"""

import gzip
import json
from pathlib import Path

TEXT_SUFFIX = {"text": "txt"}  # the column `text` lives in `{split}.txt`


def open_text(path):
    """Open a plain or gzip (by the `.gz` suffix) UTF-8 text file for reading."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def read_lines(path):
    """All lines of a text file without their `\\n` (split on `\\n` only, never on U+2028)."""
    with open_text(path) as f:
        return [line[:-1] if line.endswith("\n") else line for line in f]


def match_split(wanted, available, where):
    """The name in `available` that `wanted` refers to (exact, else the one prefix match)."""
    available = sorted(set(available))
    if wanted in available:
        return wanted
    matches = [s for s in available if s.startswith(wanted) or wanted.startswith(s)]
    if len(matches) != 1:
        raise ValueError(f"split {wanted!r} matches {matches or 'nothing'} in {where} (splits: {available})")
    return matches[0]


def _local_file(folder, split, suffix):
    for name in (f"{split}.{suffix}", f"{split}.{suffix}.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _local_splits(folder):
    return {p.name.split(".")[0] for p in folder.iterdir() if p.is_file() and "." in p.name}


def _read_local(folder, split, columns):
    """Records of one split from text or JSON lines files in `folder`."""
    split = match_split(split, _local_splits(folder), folder)
    jsonl = _local_file(folder, split, "jsonl")
    if jsonl is not None:
        with open_text(jsonl) as f:
            return [json.loads(line) for line in f if line.strip()]
    files = {c: _local_file(folder, split, TEXT_SUFFIX.get(c, c)) for c in columns}
    missing = [f"{split}.{TEXT_SUFFIX.get(c, c)}[.gz]" for c, path in files.items() if path is None]
    if missing:
        raise FileNotFoundError(f"{folder} has no {' or '.join(missing)} (nor {split}.jsonl)")
    lines = {c: read_lines(path) for c, path in files.items()}
    counts = {c: len(v) for c, v in lines.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"line-aligned files of split {split!r} in {folder} differ in length: {counts}")
    return [dict(zip(lines, row, strict=True)) for row in zip(*lines.values(), strict=True)]


def _read_saved(folder, split):
    """Records of one split from a folder written by `save_to_disk`."""
    import datasets

    dataset = datasets.load_from_disk(str(folder))
    if isinstance(dataset, datasets.Dataset):
        return dataset
    return dataset[match_split(split, dataset.keys(), folder)]


def _read_hub(name, split, config):
    """Records of one split of a Hub dataset (needs the network or the local datasets cache)."""
    import datasets

    try:
        split_names = datasets.get_dataset_split_names(name, config)
    except Exception as error:  # offline, unknown name, ...: say both readings of `name`
        raise FileNotFoundError(f"{name!r} is not a local folder, and as a Hub dataset: {error}") from error
    return datasets.load_dataset(name, config, split=match_split(split, split_names, name))


def _is_hub_name(location):
    """`owner/name` or `name`: not a path that was meant to exist locally."""
    text = str(location)
    return text.count("/") <= 1 and not text.startswith((".", "/", "~")) and not text.endswith("/")


def _column(record, column):
    if column in record:
        return record[column]
    if "translation" in record and column in record["translation"]:
        return record["translation"][column]
    raise KeyError(f"record has no column {column!r} (keys: {sorted(record)})")


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

    `limit` keeps only the first `limit` records (tiny slices for tests and quick runs).
    """
    folder = Path(location)
    if (folder / "dataset_dict.json").is_file() or (folder / "dataset_info.json").is_file():
        records = _read_saved(folder, split)
    elif folder.is_dir():
        records = _read_local(folder, split, columns)
    elif _is_hub_name(location):
        records = _read_hub(str(location), split, config)
    else:
        raise FileNotFoundError(f"{location} is neither a data folder nor a Hub dataset name")
    if limit is not None:
        records = records.select(range(min(limit, len(records)))) if hasattr(records, "select") else records[:limit]
    return {c: [_column(r, c) for r in records] for c in columns}
