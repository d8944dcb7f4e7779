"""Reading splits: gzip/plain text, JSON lines, `datasets` folders, loose split names, clear errors."""

import gzip
import json

import pytest
from common.data import DataError, load_columns, match_split, read_lines, split_name

from .conftest import MULTI30K, WIKITEXT, requires_data

PAIRS = {"de": ["Ein Hund läuft.", "Zwei Männer\u00a0sitzen."], "en": ["A dog runs.", "Two men sit."]}


def write_text(folder, name, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode()
    (folder / name).write_bytes(gzip.compress(data) if compress else data)


@requires_data
def test_multi30k_gzip_is_line_aligned_and_limited():
    columns = load_columns(MULTI30K, "validation", ["de", "en"], limit=5)
    assert {k: len(v) for k, v in columns.items()} == {"de": 5, "en": 5}
    assert columns["en"][0] == read_lines(MULTI30K / "val.en.gz")[0]
    assert len(load_columns(MULTI30K, "test", ["en"])["en"]) == 1000  # `test` finds test_2016_flickr


@requires_data
def test_wikitext_lines_keep_their_spacing():
    lines = load_columns(WIKITEXT, "valid", ["text"], limit=3)["text"]
    assert lines == [" ", " = Homarus gammarus = ", " "]


@pytest.mark.parametrize("compress", [False, True])
def test_plain_and_gzip_text_files_read_alike(tmp_path, compress):
    suffix = ".gz" if compress else ""
    for lang, lines in PAIRS.items():
        write_text(tmp_path, f"train.{lang}{suffix}", lines, compress)
    assert load_columns(tmp_path, "train", ["de", "en"]) == PAIRS


def test_json_lines_with_flat_or_translation_records(tmp_path):
    flat = [{"de": d, "en": e} for d, e in zip(PAIRS["de"], PAIRS["en"], strict=True)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flat))
    nested = [{"translation": r} for r in flat]
    (tmp_path / "valid.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in nested).encode()))
    assert load_columns(tmp_path, "train", ["de", "en"]) == PAIRS
    assert load_columns(tmp_path, "validation", ["de", "en"]) == PAIRS


def test_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")  # the GPU machine's image has no `datasets`
    datasets.DatasetDict({"validation": datasets.Dataset.from_dict(PAIRS)}).save_to_disk(tmp_path / "saved")
    assert load_columns(tmp_path / "saved", "valid", ["de", "en"], limit=1) == {
        "de": PAIRS["de"][:1],
        "en": PAIRS["en"][:1],
    }


def test_split_names_match_loosely_but_never_ambiguously():
    assert match_split("validation", ["train", "val"], "x") == "val"
    assert match_split("test", ["test_2016_flickr", "train"], "x") == "test_2016_flickr"
    with pytest.raises(ValueError, match="matches"):
        match_split("test", ["test_2016", "test_2017"], "x")
    with pytest.raises(ValueError, match="nothing"):
        match_split("dev", ["train"], "x")


def test_bad_locations_say_what_is_missing(tmp_path):
    write_text(tmp_path, "train.de", PAIRS["de"])
    with pytest.raises(DataError, match=r"train\.en"):
        load_columns(tmp_path, "train", ["de", "en"])
    write_text(tmp_path, "train.en", PAIRS["en"][:1])
    with pytest.raises(ValueError, match="differ in length"):
        load_columns(tmp_path, "train", ["de", "en"])
    with pytest.raises(DataError, match="neither"):
        load_columns(tmp_path / "missing" / "folder", "train", ["de"])


def test_hub_names_fail_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match="not a local folder"):
        load_columns("no-such-owner/no-such-dataset", "train", ["text"])


# --- faults: each error names the file (and line) and what was expected ---------------------------


def test_bytes_that_are_not_utf8_name_the_file_line_and_offset(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"fine\nGr\xfc\xdfe aus K\xf6ln\n")  # Latin-1, not UTF-8
    with pytest.raises(DataError, match=r"train\.txt: line 2 is not UTF-8 text \(byte 0xfc at byte offset 7"):
        load_columns(tmp_path, "train", ["text"])
    (tmp_path / "valid.txt.gz").write_bytes(gzip.compress(b"ok\nok\n\xff\n"))
    with pytest.raises(DataError, match=r"valid\.txt\.gz: line 3 is not UTF-8 text .* offset 6 after decompression"):
        load_columns(tmp_path, "valid", ["text"])


def test_a_truncated_gzip_file_is_named_as_truncated(tmp_path):
    whole = gzip.compress("".join(f"line {i}\n" for i in range(2000)).encode())
    (tmp_path / "train.txt.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"train\.txt\.gz is truncated: .* ends early, after \d+ complete lines"):
        load_columns(tmp_path, "train", ["text"])


def test_a_gz_file_that_is_not_gzip_says_so(tmp_path):
    write_text(tmp_path, "train.txt.gz", ["plain text under a .gz name"])
    with pytest.raises(DataError, match=r"train\.txt\.gz is not gzip data .*drop \.gz from its name"):
        load_columns(tmp_path, "train", ["text"])


def test_a_damaged_gzip_file_is_named(tmp_path):
    data = bytearray(gzip.compress(b"some text\n" * 100))
    data[-8] ^= 0xFF  # the CRC of the data
    (tmp_path / "train.txt.gz").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"train\.txt\.gz is damaged gzip data"):
        load_columns(tmp_path, "train", ["text"])


def test_json_lines_faults_name_the_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"de": "a", "en": "b"}\n\n{"de": "a", "en": \n')
    with pytest.raises(DataError, match=r"train\.jsonl: line 3 is not JSON"):
        load_columns(tmp_path, "train", ["de", "en"])
    path.write_text('{"de": "a", "en": "b"}\n["a", "b"]\n')
    with pytest.raises(DataError, match=r"line 2 is a JSON list, not an object"):
        load_columns(tmp_path, "train", ["de", "en"])
    path.write_text('{"de": "a", "en": "b"}\n{"de": "a", "fr": "b"}\n')
    with pytest.raises(DataError, match=r"train\.jsonl: line 2 has no column 'en'"):
        load_columns(tmp_path, "train", ["de", "en"])
    path.write_text('{"de": "a", "en": null}\n')
    with pytest.raises(DataError, match=r"line 1: column 'en' holds NoneType None, not text"):
        load_columns(tmp_path, "train", ["de", "en"])


@pytest.mark.parametrize("lines", [[], ["", "  ", "\t"]], ids=["empty", "blank"])
def test_a_split_without_text_is_refused(tmp_path, lines):
    write_text(tmp_path, "train.txt", lines)
    with pytest.raises(DataError, match=r"train\.txt: (no records, the split is empty|column 'text' is blank)"):
        load_columns(tmp_path, "train", ["text"])


def test_a_translation_side_without_text_is_refused(tmp_path):
    write_text(tmp_path, "valid.de", ["Ein Hund.", "Zwei."])
    write_text(tmp_path, "valid.en", ["", " "])
    with pytest.raises(DataError, match=r"valid\.en: column 'en' is blank .* in all 2 records"):
        load_columns(tmp_path, "validation", ["de", "en"])


def test_split_name_is_the_split_as_the_data_spells_it(tmp_path):
    for name in ("train.de", "train.en", "val.de", "val.en", "test_2016_flickr.de", "test_2016_flickr.en"):
        (tmp_path / name).write_text("x\n")
    assert split_name(tmp_path, "test") == "test_2016_flickr"
    assert split_name(tmp_path, "validation") == "val"
    assert split_name(tmp_path, "train") == "train"
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "validation", "test"]}))
    assert split_name(saved, "valid") == "validation"
