"""Inputs of the Accelerate scripts that others would leave without effect: refused by name, or (where
refusing would leave no way to a documented use) run with a warning that names them.

* a tokenizer-training flag given with --tokenizer (an existing tokenizer takes none of them);
* --eval_every given with --eval_every_minutes (the minutes would win);
* two files of one split in --data_dir (one would be read, the other ignored);
* --schedule cosine over --epochs under --max_train_minutes (the decay may never come): a warning;
* a label-smoothed training loss, whose exponential is no perplexity: no `ppl` in its log records.
"""

import gzip
import json
import math
from types import SimpleNamespace

import pytest
from common import records
from common.checkpoints import Progress

from .conftest import TINY_MODEL, load_script
from .test_run_faults import train
from .test_run_settings_faults import fresh_accelerate_state  # noqa: F401 (autouse: each run its own Accelerator)
from .test_start_faults import LM_FLAGS, LM_SCRIPT, LM_TEXT, lm_data, start_error, write_lines


def parse(*flags, script=LM_SCRIPT):
    """The script's checked arguments for the command line `flags` (and an --output_dir)."""
    return load_script(script).parse_args(["--output_dir", "unused-run", *map(str, flags)])


@pytest.mark.parametrize("flag, value", [("--vocab_size", 300), ("--tokenizer_kind", "bpe"), ("--min_frequency", 2)])
def test_a_tokenizer_training_flag_with_tokenizer_is_refused(flag, value):
    with pytest.raises(
        SystemExit, match=rf"{flag} {value} shape\(s\) the tokenizer a run trains, but --tokenizer gpt2"
    ):
        parse("--tokenizer", "gpt2", flag, value)


def test_the_tokenizer_flags_keep_their_defaults_and_a_resume_compares_them_instead():
    """Not given, they take the defaults args.json records; with --resume the run's args.json judges them
    (an old run folder started with both resumes with its own command)."""
    args = parse("--tokenizer", "gpt2")
    assert (args.tokenizer_kind, args.vocab_size, args.min_frequency, args.eval_every) == ("word", 40000, 1, 500)
    assert parse("--vocab_size", 300).vocab_size == 300  # without --tokenizer: trains one of that size
    assert parse("--tokenizer", "gpt2", "--vocab_size", 300, "--resume").vocab_size == 300


def test_eval_every_with_eval_every_minutes_is_refused():
    with pytest.raises(SystemExit, match=r"--eval_every 100 and --eval_every_minutes 5\.0 both pace the evaluations"):
        parse("--eval_every", 100, "--eval_every_minutes", 5)
    assert parse("--eval_every_minutes", 5).eval_every_minutes == 5
    assert parse("--eval_every", 100).eval_every == 100


def add_gzip_copy(path):
    path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))


def add_jsonl(path):
    write_lines(path.with_name("train.jsonl"), [json.dumps({"text": line}) for line in LM_TEXT])


@pytest.mark.parametrize("add, second", [(add_gzip_copy, "train.txt.gz"), (add_jsonl, "train.jsonl")])
def test_two_files_of_one_split_are_refused_naming_both(tmp_path, add, second):
    data = lm_data(tmp_path / "data")
    add(data / "train.txt")
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS, "--threads", "1")
    assert "--train_split train: split 'train' is in " in message
    assert str(data / "train.txt") in message and str(data / second) in message
    assert "one of them would be read and the other ignored" in message


def tiny_run(tmp_path, *flags):
    """A tiny LM run of one epoch under --schedule cosine (no test split); its log's step records."""
    data = lm_data(tmp_path / "data")
    args = [
        *("--data_dir", data, *TINY_MODEL, *LM_FLAGS, "--schedule", "cosine", "--warmup_steps", "1"),
        *"--epochs 1 --log_every 1 --threads 1".split(),
        *("--test_split", ""),
    ]
    train(tmp_path / "run", *flags, script=LM_SCRIPT, args=args)
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if "loss" in record]


def test_cosine_over_epochs_under_a_time_budget_is_warned_about(tmp_path, capsys):
    steps = tiny_run(tmp_path, "--max_train_minutes", 60, "--label_smoothing", 0.1)
    warning = capsys.readouterr().err
    assert f"warning: --schedule cosine decays the learning rate over {len(steps)} steps (--epochs 1.0" in warning
    assert "--max_train_minutes 60.0 stops training once its time is spent" in warning
    assert steps and all("ppl" not in record for record in steps)  # label-smoothed: no perplexity


def test_cosine_with_max_steps_under_a_time_budget_is_not_warned_about(tmp_path, capsys):
    tiny_run(tmp_path, "--max_train_minutes", 60, "--max_steps", 2)
    assert "--schedule cosine decays" not in capsys.readouterr().err


@pytest.mark.parametrize("smoothed", [False, True])
def test_a_step_record_has_a_ppl_only_where_its_loss_is_the_nll(tmp_path, smoothed):
    accelerator = SimpleNamespace(is_main_process=True, log=lambda *a, **k: None)
    progress = Progress()
    path = tmp_path / "log.jsonl"
    with records.TrainingLog(accelerator, path, progress=progress, max_steps=10, log_every=1, smoothed=smoothed) as log:
        progress.advance(batches=1, tokens=10, seconds=1.0)
        log.step(progress, loss=2.0, lr=1e-3, tokens=10)
    (record,) = records.read_log(path)
    assert record["loss"] == 2.0 and record.get("ppl") == (None if smoothed else math.exp(2.0))
