"""examples/summarization/train.py: its data (local files, the Hub call, the refusals), ROUGE, and runs
end to end on the fixture tests/fixtures/summarization (made-up news articles with one highlight per
line): train, evaluate, resume exactly, report; decoding with every model type; the baseline's run."""

import gzip
import json
import shutil

import datasets
import pytest
from common import signals
from common.data import read_lines
from common.models import build_model
from common.pacing import STOP_AFTER_STEPS
from common.tokenizer import train_tokenizer
from summarization import documents
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import ROOT, TINY_MODEL, load_script, read_log, run

FIXTURE = ROOT / "tests" / "fixtures" / "summarization"
SCRIPT = "summarization/train.py"
# A tiny model and short summaries: the runs check the plumbing, not the summaries.
SIZES = [*TINY_MODEL, "--encoder_layers", "1", "--vocab_size", "400", "--max_source_tokens", "128"]
SIZES += "--max_target_tokens 96 --min_summary_tokens 4 --max_summary_tokens 24 --num_beams 2".split()
FLAGS = [*SIZES, *"--max_tokens 1024 --warmup_steps 2 --log_every 1 --threads 1".split()]
FILES = ["--train_file", FIXTURE / "train.jsonl", "--validation_file", FIXTURE / "validation.tsv"]


@pytest.fixture(autouse=True)
def no_signal_handlers(monkeypatch):
    """`main` runs in the test process here: leave its terminal-stop handling alone."""
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)


def fixture_copy(folder):
    """The fixture's files, copied into `folder` to be damaged."""
    shutil.copytree(FIXTURE, folder)
    return folder


def records_of(path):
    return [json.loads(line) for line in read_lines(path)]


def write_records(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def start_error(output_dir, *argv):
    """The error with which the script stops for `argv`; checks that it wrote nothing."""
    with pytest.raises(SystemExit) as stop:
        load_script(SCRIPT).main(["--output_dir", str(output_dir), *map(str, FLAGS), *map(str, argv)])
    assert not output_dir.exists(), f"the script wrote {sorted(p.name for p in output_dir.iterdir())}"
    return str(stop.value.code)


def parse(*argv):
    return load_script(SCRIPT).parse_args(["--output_dir", "unused", *map(str, argv)])


# --- data -------------------------------------------------------------------------------------------


def test_the_fixtures_jsonl_csv_and_tsv_forms_read_alike():
    columns = ["article", "highlights"]
    forms = [documents.read_file(FIXTURE / f"validation.{kind}", columns) for kind in ("jsonl", "csv", "tsv")]
    assert forms[0] == forms[1] == forms[2] and len(forms[0]["article"]) == 8
    assert all(summary.count("\n") >= 1 for summary in forms[0]["highlights"])  # one highlight per line
    assert len(documents.read_file(FIXTURE / "train.csv", columns, limit=5)["highlights"]) == 5


def test_a_gzip_file_reads_as_the_plain_one(tmp_path):
    (tmp_path / "train.csv.gz").write_bytes(gzip.compress((FIXTURE / "train.csv").read_bytes()))
    columns = ["article", "highlights"]
    assert documents.read_file(tmp_path / "train.csv.gz", columns) == documents.read_file(
        FIXTURE / "train.csv", columns
    )


@pytest.mark.parametrize(
    "name, config, columns, splits",
    [
        ("abisee/cnn_dailymail", "3.0.0", ("article", "highlights"), ["train", "validation", "test"]),
        ("EdinburghNLP/xsum", None, ("document", "summary"), ["train", "validation", "test"]),
    ],
)
def test_a_hub_dataset_is_loaded_with_its_configuration_and_columns(monkeypatch, name, config, columns, splits):
    """The Hub boundary mocked: `datasets.load_dataset` gets the dataset, its configuration and each split,
    and the pairs come from the dataset's own columns, which the options default to."""
    calls = []
    fixture = records_of(FIXTURE / "validation.jsonl")
    rows = {columns[0]: [r["article"] for r in fixture], columns[1]: [r["highlights"] for r in fixture]}

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({**rows, "id": [str(i) for i in range(len(fixture))]})

    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda path, config=None: splits)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    args = parse("--dataset_name", name, "--max_eval_samples", 3)
    assert (args.dataset_config, args.document_column, args.summary_column) == (config, *columns)
    pairs = documents.read_splits(args)
    assert calls == [(name, config, split) for split in splits]
    assert pairs["train"].documents == rows[columns[0]] and len(pairs["test"].summaries) == 3
    assert pairs["validation"].where == f"--validation_split validation of {name}"


def test_a_hub_dataset_without_the_column_is_named(monkeypatch):
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda path, config=None: ["train", "validation"])
    dataset = datasets.Dataset.from_dict({"document": ["A text."], "summary": ["Text."]})
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, split=None: dataset)
    with pytest.raises(SystemExit) as stop:
        documents.read_splits(parse("--test_split", ""))  # CNN-DM's columns: article and highlights
    assert (
        "--train_split train: split 'train' of the Hub dataset abisee/cnn_dailymail: record 0 has no column 'article'"
        in str(stop.value)
    )


# --- bad input: each stops the start, naming the file, the record and the column -------------------


def test_a_missing_column_names_the_file_and_the_column(tmp_path):
    data = fixture_copy(tmp_path / "data")
    write_records(
        data / "train.jsonl",
        [{"text": r["article"], "highlights": r["highlights"]} for r in records_of(data / "train.jsonl")],
    )
    message = start_error(
        tmp_path / "run", "--train_file", data / "train.jsonl", "--validation_file", data / "validation.csv"
    )
    assert f"--train_file: {data / 'train.jsonl'}: line 1 has no column 'article'" in message
    header = (data / "validation.csv").read_text().replace("article,highlights", "story,highlights", 1)
    (data / "validation.csv").write_text(header)
    message = start_error(
        tmp_path / "run", "--train_file", FIXTURE / "train.jsonl", "--validation_file", data / "validation.csv"
    )
    assert f"--validation_file: {data / 'validation.csv'} has no column 'article'" in message
    assert "(its header: ['story', 'highlights']): --document_column and --summary_column name" in message


def test_an_empty_document_is_named_and_skip_blank_pairs_leaves_it_out(tmp_path):
    data = fixture_copy(tmp_path / "data")
    records = records_of(data / "train.jsonl")
    records[3]["article"], records[7]["highlights"] = "  ", ""
    write_records(data / "train.jsonl", records)
    files = ["--train_file", data / "train.jsonl", "--validation_file", FIXTURE / "validation.jsonl"]
    message = start_error(tmp_path / "run", *files)
    assert f"--train_file {data / 'train.jsonl'}: record 3 (counting from 0) has no text in column 'article'" in message
    assert "2 of the 40 records lack a document or a summary" in message and "--skip_blank_pairs" in message
    split = documents.read_splits(parse(*files, "--skip_blank_pairs"))["train"]
    assert split.skipped == 2 and len(split.documents) == 38 and records[3]["article"] not in split.documents
    assert split.records[:4] == [0, 1, 2, 4]  # the records' own numbers, for later errors


def test_a_summary_longer_than_the_limit_is_named_and_truncate_summaries_cuts_it(tmp_path):
    message = start_error(tmp_path / "run", *FILES, "--max_target_tokens", 40)
    assert f"--train_file {FIXTURE / 'train.jsonl'}: the summary of record " in message
    assert "more than --max_target_tokens 40;" in message and "Raise --max_target_tokens to " in message
    assert "or give --truncate_summaries to cut them" in message
    args = parse(*FILES, *SIZES, "--max_target_tokens", 40, "--truncate_summaries")
    split = documents.read_splits(args)["train"]
    tokenizer = train_tokenizer(split.documents + split.summaries, "bpe", 400, add_eos=True)
    encoded = documents.encode_split(tokenizer, split, args)
    targets = [example["target"] for example in encoded.examples]
    assert encoded.cut_summaries == sum(len(ids) > 40 for ids in tokenizer(split.summaries)["input_ids"]) > 0
    assert max(map(len, targets)) == 40 and all(ids[-1] == tokenizer.eos_token_id for ids in targets)
    assert encoded.cut_documents == 40  # every article is longer than --max_source_tokens 128


def test_documents_are_cut_to_max_source_tokens_with_their_end_token():
    tokenizer = train_tokenizer(["a b c d e f g h", "a b"], "bpe", 40, add_eos=True)
    ids, cut = documents.encode_texts(tokenizer, ["a b c d e f g h", "a b", "c d e f"], limit=4)
    assert cut == [0, 2] and [len(i) for i in ids] == [4, 3, 4]
    assert ids[0] == tokenizer("a b c")["input_ids"] and ids[1] == tokenizer("a b")["input_ids"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("article,highlights\nOne text.,One.\nTwo,texts.,Two.\n", "line 3 has 3 fields, the header 2"),
        ("", "is empty: its first line must name the columns"),
    ],
    ids=["a row of three fields", "no header"],
)
def test_a_csv_file_that_does_not_parse_is_named(tmp_path, text, expected):
    (tmp_path / "train.csv").write_text(text)
    with pytest.raises(documents.DataError, match=expected):
        documents.read_file(tmp_path / "train.csv", ["article", "highlights"])


def test_a_file_of_another_kind_is_refused(tmp_path):
    (tmp_path / "train.txt").write_text("text\n")
    with pytest.raises(documents.DataError, match=r"train.txt is no .jsonl, .csv or .tsv file"):
        documents.read_file(tmp_path / "train.txt", ["article", "highlights"])
    with pytest.raises(documents.DataError, match=r"missing.jsonl is not a file"):
        documents.read_file(tmp_path / "missing.jsonl", ["article", "highlights"])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--train_file", FIXTURE / "train.jsonl"], "local files need both"),
        (
            ["--test_file", FIXTURE / "test.csv"],
            "--test_file given, but local files need both --train_file and --validation_file",
        ),
        ([*FILES, "--data_dir", FIXTURE], "--data_dir chooses data of a folder or a Hub dataset"),
        ([*FILES, "--test_split", ""], "drop --test_split \\(without --test_file there is no test split\\)"),
        (["--min_summary_tokens", "50", "--max_summary_tokens", "20"], "--min_summary_tokens 50 is above"),
        (["--max_tokens", "300"], "--max_tokens 300 is below the 400 tokens of --max_source_tokens"),
        (["--length_penalty", "nan"], "--length_penalty must be a finite number"),
        (["--no_repeat_ngram_size", "-1"], "--no_repeat_ngram_size must be >= 0"),
    ],
)
def test_bad_flags_fail_with_a_clear_message(flags, message):
    with pytest.raises(SystemExit, match=message):
        parse(*flags)


@pytest.mark.parametrize("preset", ["cnn-dm", "cnn-dm-deep", "small"])
@pytest.mark.parametrize("model_type", ["talk", "dynamic_conv", "light_conv", "transformer"])
def test_the_papers_presets_and_the_cpu_preset_are_accepted(preset, model_type):
    assert parse("--preset", preset, "--model_type", model_type).preset == preset


# --- decoding and ROUGE ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["talk", "dynamic_conv", "light_conv", "slicenet", "transformer"])
def test_every_model_type_decodes_with_the_papers_options(model_type):
    """`summarize`'s beam search on a tiny model of each type: between --min_summary_tokens and
    --max_summary_tokens new tokens, and no trigram twice in a summary (--no_repeat_ngram_size 3)."""
    script = load_script(SCRIPT)
    split = documents.read_splits(parse(*FILES))["validation"]
    tokenizer = train_tokenizer(split.documents + split.summaries, "bpe", 300, add_eos=True)
    sizes = dict(d_model=32, encoder_layers=1, decoder_layers=1, dropout=0.0)
    sizes.update({} if model_type == "slicenet" else dict(ffn_dim=64, heads=2))
    model = build_model(model_type, tokenizer, True, **sizes).eval()
    outputs = []

    def generate(**options):
        outputs.append(type(model).generate(model, **options))
        return outputs[-1]

    model.generate = generate
    args = parse(*"--num_beams 3 --no_repeat_ngram_size 3 --min_summary_tokens 6 --max_summary_tokens 12".split())
    batch = tokenizer(split.documents[:2], truncation=True, max_length=64, padding=True, return_tensors="pt")
    texts = script.summarize(model, tokenizer, batch["input_ids"], batch["attention_mask"], args, args.num_beams)
    (output,) = outputs
    assert len(texts) == 2 and 6 <= output.shape[1] - 1 <= 12  # after the decoder's start token
    for row in output.tolist():
        tokens = [token for token in row[1:] if token != tokenizer.pad_token_id]
        trigrams = [tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)]
        assert len(trigrams) == len(set(trigrams)), row


def test_rouge_lsum_splits_sentences_at_newlines():
    """Two sentences in the other order: as one token sequence the longest common subsequence is one
    sentence, 3 of 6 tokens (rougeL 50); sentence against sentence both match whole (rougeLsum 100).
    Bigrams: 4 of the 5 are shared ("sat the" / "ran the" differ): rouge2 80."""
    rouge = load_script(SCRIPT).rouge
    reference, summary = "the cat sat\nthe dog ran", "the dog ran\nthe cat sat"
    scores = rouge([summary], [reference])
    assert scores == pytest.approx({"rouge1": 100.0, "rouge2": 80.0, "rougeL": 50.0, "rougeLsum": 100.0})
    # The same words on one line: no sentences to match, so rougeLsum is rougeL.
    assert rouge([summary.replace("\n", " ")], [reference.replace("\n", " ")])["rougeLsum"] == pytest.approx(50.0)
    # The mean over the pairs: a perfect pair and one without a shared word.
    assert rouge([reference, "a bird"], [reference, "the cat"])["rouge1"] == pytest.approx(50.0)


# --- runs -------------------------------------------------------------------------------------------


def without_time(records):
    return [{key: value for key, value in record.items() if key != "seconds"} for record in records]


@pytest.mark.slow
def test_summarization_trains_evaluates_resumes_exactly_and_reports(tmp_path):
    """A TaLK run of 6 steps (5 per epoch: it crosses an epoch end; dropout on, so the restored random
    state matters) against one stopped after step 5 with its state saved at step 4, then resumed: the
    same log, the same best model and the same test report. The three file forms in one run."""
    data = ["--train_file", FIXTURE / "train.jsonl", "--validation_file", FIXTURE / "validation.tsv"]
    args = [*data, "--test_file", FIXTURE / "test.csv", *FLAGS, "--dropout", "0.1"]
    args += "--max_steps 6 --eval_every 3 --save_every 2".split()
    output = run(SCRIPT, *args, "--output_dir", tmp_path / "whole")
    assert f"--train_file {FIXTURE / 'train.jsonl'}: 40 pairs, 40 documents cut to 128 tokens" in output
    run(SCRIPT, *args, "--output_dir", tmp_path / "cut", env={STOP_AFTER_STEPS: "5"})
    assert not (tmp_path / "cut" / "test_results.json").exists()
    resumed = run(SCRIPT, *args, "--output_dir", tmp_path / "cut", "--resume")
    assert "at step 4" in resumed
    whole_steps, whole_evaluations = read_log(tmp_path / "whole")
    resumed_steps, resumed_evaluations = read_log(tmp_path / "cut")
    assert max(r["epoch"] for r in whole_steps) == 1 and [r["step"] for r in whole_evaluations] == [3, 6]
    assert without_time(resumed_steps) == without_time(whole_steps)
    assert without_time(resumed_evaluations) == without_time(whole_evaluations)
    for evaluation in whole_evaluations:
        assert all(0 <= evaluation[name] <= 100 for name in ("rouge1", "rouge2", "rougeL", "rougeLsum"))
    report = json.loads((tmp_path / "whole" / "test_results.json").read_text())
    assert report == {
        **json.loads((tmp_path / "cut" / "test_results.json").read_text()),
        "checkpoint": report["checkpoint"],
    }
    assert report["split"] == str(FIXTURE / "test.csv") and {"test_loss", "test_rougeLsum"} <= report.keys()
    assert "test_results.json" in json.loads((tmp_path / "whole" / "outputs.json").read_text())["outputs"]
    best = json.loads((tmp_path / "whole" / "best" / "training_state.json").read_text())
    assert best["rougeLsum"] == max(r["rougeLsum"] for r in whole_evaluations)
    settings = json.loads((tmp_path / "whole" / "args.json").read_text())
    assert (settings["document_column"], settings["summary_column"]) == ("article", "highlights")
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "whole" / "best")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "whole" / "best")
    assert model.generate(**tokenizer(["Rain fell in Leeds."], return_tensors="pt"), max_new_tokens=3).shape[0] == 1


@pytest.mark.slow
def test_the_transformer_baseline_trains_on_the_fixture(tmp_path):
    flags = ["--model_type", "transformer", *"--max_steps 2 --eval_every 2".split(), "--output_dir", tmp_path]
    run(SCRIPT, *FILES, *FLAGS, *flags)
    _, evaluations = read_log(tmp_path)
    assert [r["step"] for r in evaluations] == [2] and 0 <= evaluations[0]["rougeLsum"] <= 100
    config = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "best").config
    assert config.model_type == "marian" and config.max_position_embeddings >= 128
