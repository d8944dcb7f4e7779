"""The document/summary pairs of a summarization run: where they are read from, which are refused, and
how they become token ids.

* Data: a Hub dataset (`--dataset_name`, `--dataset_config`) or a local folder (`--data_dir`), both
  read as the other scripts read them (`common.data`), or local files `--train_file`,
  `--validation_file` and `--test_file`: JSON lines (`.jsonl`), CSV (`.csv`) or tab-separated values
  (`.tsv`), plain or gzip (`.gz`). CSV and TSV files start with a header row that names the columns;
  a field in double quotes may hold newlines.
* Columns: `--document_column` and `--summary_column`. For the Hub datasets of `KNOWN_DATASETS` they
  and `--dataset_config` default to the dataset's own, otherwise to `document` and `summary`.
* Every pair needs text on both sides: a blank document or summary stops the run naming the split,
  the record and the column, unless `--skip_blank_pairs` leaves such pairs out (counted).
* Encoding: documents are cut to `--max_source_tokens` (the papers' 400), their end token kept; a
  summary longer than `--max_target_tokens` stops the run naming it, unless `--truncate_summaries`
  cuts it too (counted). Summaries keep their newlines: the model learns to write one highlight per
  line, and ROUGE-Lsum splits sentences there.
"""

from dataclasses import dataclass
from pathlib import Path

from common.data import DataError, columns_of, load_splits, read_jsonl, read_lines
from common.messages import fail

# Hub datasets whose configuration and columns the options default to: {name: (config, document, summary)}.
KNOWN_DATASETS = {
    "abisee/cnn_dailymail": ("3.0.0", "article", "highlights"),
    "EdinburghNLP/xsum": (None, "document", "summary"),
}
PLAIN_COLUMNS = ("document", "summary")  # the columns' defaults for any other data
SPLITS = ("train", "validation", "test")
DELIMITERS = {".csv": ",", ".tsv": "\t"}  # and `.jsonl`, read by `common.data.read_jsonl`
ENCODE_CHUNK = 1000  # texts per tokenizer call: the pieces of a long text exist for one chunk at a time


@dataclass
class Split:
    """One split's text pairs, aligned by index. `where` names the split (its file, or its option and
    dataset) and `records` each pair's record number there (counting from 0) in errors; `skipped` counts
    the records `--skip_blank_pairs` left out."""

    documents: list[str]
    summaries: list[str]
    where: str
    records: list[int]
    skipped: int = 0


@dataclass
class EncodedSplit:
    """A split as examples {"source": ids, "target": ids, "index": int} (`batching.TranslationCollator`'s
    input; `index` points into the `Split`), and how many documents and summaries were cut."""

    examples: list[dict]
    cut_documents: int
    cut_summaries: int


def dataset_defaults(dataset_name):
    """(config, document column, summary column) that the options default to for `dataset_name`."""
    return KNOWN_DATASETS.get(dataset_name, (None, *PLAIN_COLUMNS))


def describe_known():
    """`--dataset_config and the columns default to ...`, a line per dataset of `KNOWN_DATASETS`: the help."""
    lines = ["--dataset_config and the columns default to the --dataset_name's own:"]
    for name, (config, document, summary) in KNOWN_DATASETS.items():
        configuration = "no configuration" if config is None else f"configuration {config}"
        lines.append(f"  {name}: {configuration}, columns {document} and {summary}")
    lines.append(f"  any other: no configuration, columns {' and '.join(PLAIN_COLUMNS)}")
    return "\n".join(lines)


def file_option(key):
    """The option that names the local file of split `key` ("train": `--train_file`)."""
    return f"--{key}_file"


def read_splits(args):
    """The splits {"train", "validation", "test"} of the run as `Split`s (test: None when there is none),
    each checked for blank pairs (`check_blank_pairs`). Read before anything is written: data that cannot
    be read stops the script with an error naming the option, the file and the column."""
    columns = [args.document_column, args.summary_column]
    if args.train_file is None:
        tables = load_splits(args, columns)
        location = args.data_dir or args.dataset_name
        wheres = {key: f"--{key}_split {getattr(args, f'{key}_split')} of {location}" for key in SPLITS}
    else:
        paths = {key: getattr(args, f"{key}_file") for key in SPLITS}
        tables = {
            key: None if path is None else read_file_option(key, path, columns, args) for key, path in paths.items()
        }
        wheres = {key: f"{file_option(key)} {path}" for key, path in paths.items()}
    return {
        key: None if table is None else check_blank_pairs(table, columns, wheres[key], args.skip_blank_pairs)
        for key, table in tables.items()
    }


def read_file_option(key, path, columns, args):
    """`columns` of the file `path` that `--{key}_file` names, cut to `--max_train_samples` or
    `--max_eval_samples`; a file that cannot be read stops the script naming the option."""
    limit = args.max_train_samples if key == "train" else args.max_eval_samples
    try:
        return read_file(path, columns, limit)
    except DataError as error:
        fail(f"{file_option(key)}: {error}")


def read_file(path, columns, limit=None):
    """`columns` of a JSON lines, CSV or TSV file (plain or `.gz`) as {column: [str, ...]}, the first
    `limit` records only when it is given. Raises DataError naming the file (and line) for a file that
    is missing, of another kind, or that cannot be read, and (`common.data.columns_of`) for a missing
    column, no records, or a column blank in every record."""
    path = Path(path)
    kind = Path(path.name.removesuffix(".gz")).suffix
    if not path.is_file():
        raise DataError(f"{path} is not a file")
    if kind == ".jsonl":
        records = read_jsonl(path, columns)
    elif kind in DELIMITERS:
        records = read_delimited(path, DELIMITERS[kind], columns)
    else:
        raise DataError(f"{path} is no .jsonl, .csv or .tsv file (plain or .gz): the name's ending says which")
    return columns_of(records, columns, str(path), limit)


def read_delimited(path, delimiter, columns):
    """The rows of a CSV file (`delimiter` ","), or TSV ("\\t"), with a header row, as records
    {column: text}. Raises DataError naming the file: no header, a header without one of `columns`, a
    row whose field count is not the header's (with its line), or text the csv module cannot parse."""
    import csv

    reader = csv.reader((line + "\n" for line in read_lines(path)), delimiter=delimiter)  # "\n" kept in quotes
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path} is empty: its first line must name the columns")
        missing = [column for column in columns if column not in header]
        if missing:
            raise DataError(
                f"{path} has no column {missing[0]!r} (its header: {header}): --document_column and "
                "--summary_column name the columns to read"
            )
        records = []
        for row in reader:
            if not row:  # a blank line
                continue
            if len(row) != len(header):
                raise DataError(
                    f"{path}: line {reader.line_num} has {len(row)} fields, the header {len(header)} (a field "
                    "with the delimiter or a newline in it must be in double quotes)"
                )
            records.append(dict(zip(header, row, strict=True)))
    except csv.Error as error:
        raise DataError(f"{path}: line {reader.line_num} is not {delimiter!r}-separated text ({error})") from None
    return records


def check_blank_pairs(table, columns, where, skip):
    """`table` ({column: [str, ...]}) as a `Split`. A record whose document or summary is blank (empty or
    spaces) stops the script naming `where`, the record and the column; with `skip`
    (`--skip_blank_pairs`) such records are left out and counted."""
    document_column, summary_column = columns
    total = len(table[document_column])
    blank = [(index, column) for index in range(total) for column in columns if not table[column][index].strip()]
    dropped = {index for index, _ in blank}
    if blank and not skip:
        index, column = blank[0]
        fail(
            f"{where}: record {index} (counting from 0) has no text in column {column!r} (it is empty or spaces); "
            f"{len(dropped)} of the {total} records lack a document or a summary. Remove them from the data, or "
            "give --skip_blank_pairs to leave them out"
        )
    kept = [index for index in range(total) if index not in dropped]
    if not kept:
        fail(f"{where}: none of its {total} records holds both a document and a summary: there is nothing to use")
    return Split(
        documents=[table[document_column][index] for index in kept],
        summaries=[table[summary_column][index] for index in kept],
        where=where,
        records=kept,
        skipped=len(dropped),
    )


def encode_splits(tokenizer, splits, args):
    """The `Split`s of `read_splits` as `EncodedSplit`s (`encode_split`), under the same keys."""
    return {key: None if split is None else encode_split(tokenizer, split, args) for key, split in splits.items()}


def encode_split(tokenizer, split, args):
    """`split` (a `Split`) as an `EncodedSplit`: documents cut to `--max_source_tokens`; a summary longer
    than `--max_target_tokens` stops the script (`long_summaries_error`), or with `--truncate_summaries`
    is cut too."""
    sources, cut_documents = encode_texts(tokenizer, split.documents, args.max_source_tokens)
    targets, cut_summaries = encode_texts(tokenizer, split.summaries, args.max_target_tokens)
    if cut_summaries and not args.truncate_summaries:
        fail(long_summaries_error(tokenizer, split, cut_summaries, args))
    examples = [
        {"source": source, "target": target, "index": index}
        for index, (source, target) in enumerate(zip(sources, targets, strict=True))
    ]
    return EncodedSplit(examples, len(cut_documents), len(cut_summaries))


def long_summaries_error(tokenizer, split, too_long, args):
    """The error for the summaries of `split` at the indices `too_long`, longer than `--max_target_tokens`."""
    lengths = [len(ids) for ids in tokenizer([split.summaries[index] for index in too_long])["input_ids"]]
    return (
        f"{split.where}: the summary of record {split.records[too_long[0]]} (counting from 0) has {lengths[0]} tokens, more than "
        f"--max_target_tokens {args.max_target_tokens}; {len(too_long)} of the {len(split.summaries)} summaries are "
        f"longer than that (the longest: {max(lengths)} tokens). Raise --max_target_tokens to {max(lengths)}, or "
        "give --truncate_summaries to cut them"
    )


def encode_texts(tokenizer, texts, limit):
    """(the token ids of each of `texts`, cut to at most `limit` tokens with the tokenizer's special tokens
    kept, as lists; the indices of the texts that were cut)."""
    ids, cut = [], []
    for start in range(0, len(texts), ENCODE_CHUNK):
        encoded = tokenizer(
            texts[start : start + ENCODE_CHUNK],
            truncation=True,
            max_length=limit,
            return_overflowing_tokens=True,  # a cut text's further pieces, as rows of their own
            return_attention_mask=False,
        )
        if "overflow_to_sample_mapping" not in encoded:
            fail(
                f"the tokenizer ({type(tokenizer).__name__}) does not say which texts it cuts: give a fast "
                "tokenizer (a folder with tokenizer.json) as --tokenizer, or leave --tokenizer out to train one"
            )
        text_of_row = encoded["overflow_to_sample_mapping"]
        for row, text in enumerate(text_of_row):
            if row == 0 or text_of_row[row - 1] != text:  # the text's first piece
                ids.append(encoded["input_ids"][row])
            elif not cut or cut[-1] != start + text:  # a further piece: the text was cut
                cut.append(start + text)
    return ids, cut
