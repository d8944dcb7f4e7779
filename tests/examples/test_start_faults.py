"""Faults of the data and the tokenizer that the training scripts meet at their start (issue #42).

Each test injects one fault into a tiny data folder and checks the error: it names the file, the
split or the option and the fix, and the run's output folder is not even made, so the same command
runs once the data is fixed (no "holds a run" refusal, no --overwrite_output_dir).
"""

import gzip
import sys
from types import SimpleNamespace

import pytest
from common import signals
from common.batching import TokenBatchSampler
from common.models import build_model
from common.optimizer_steps import check_batches
from common.tokenizer import train_tokenizer

from .conftest import TINY_MODEL, load_script, run

LM_TEXT = [" = A title = ", " the cat sat on the mat . ", "", " the dog sat on the cat . "] * 4
PAIRS = {"de": ["ein Hund läuft .", "zwei Männer sitzen ."] * 4, "en": ["a dog runs .", "two men sit ."] * 4}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def lm_data(folder, train=LM_TEXT, valid=LM_TEXT, test=LM_TEXT):
    folder.mkdir()
    for split, lines in {"train": train, "valid": valid, "test": test}.items():
        write_lines(folder / f"{split}.txt", lines)
    return folder


def translation_data(folder):
    folder.mkdir()
    for split in ("train", "valid", "test"):
        for lang, lines in PAIRS.items():
            (folder / f"{split}.{lang}.gz").write_bytes(gzip.compress("".join(f"{t}\n" for t in lines).encode()))
    return folder


@pytest.fixture(autouse=True)
def no_signal_handlers(monkeypatch):
    """The scripts' `main` runs in the test process here: leave its terminal-stop handling alone."""
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)


def start_error(script, data, output_dir, *flags):
    """The error message with which `script` stops for `data`; checks that it wrote nothing."""
    argv = ["--data_dir", str(data), "--output_dir", str(output_dir), *TINY_MODEL, *flags]
    if script.startswith("translation"):
        argv += ["--encoder_layers", "1"]
    with pytest.raises(SystemExit) as stop:
        load_script(script).main(argv)
    assert not output_dir.exists(), f"{script} wrote {sorted(p.name for p in output_dir.iterdir())}"
    return str(stop.value.code)


LM_SCRIPT, LM_FLAGS = "language-modeling/train.py", ["--block_size", "8", "--max_tokens", "32"]


def test_an_empty_validation_split_stops_before_anything_is_written(tmp_path):
    data = lm_data(tmp_path / "data", valid=[])
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS)
    assert (
        message.startswith("error: --validation_split validation: ")
        and "valid.txt: no records, the split is empty" in message
    )


def test_an_all_blank_training_text_is_refused(tmp_path):
    data = lm_data(tmp_path / "data", train=["", " ", ""])
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS)
    assert "--train_split train: " in message and "train.txt: column 'text' is blank" in message


def test_words_all_rarer_than_min_frequency_are_refused(tmp_path):
    data = lm_data(tmp_path / "data")
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS, "--min_frequency", "100")
    assert "no word of the training text besides the special tokens occurs min_frequency=100 times" in message


def test_text_shorter_than_one_block_names_block_size_and_the_token_count(tmp_path):
    data = lm_data(tmp_path / "data", valid=[" the cat . "])
    message = start_error(LM_SCRIPT, data, tmp_path / "run", *LM_FLAGS)
    assert "--validation_split validation: its text is too short for --block_size 8: 4 tokens" in message


def test_a_truncated_gzip_file_is_named(tmp_path):
    data = translation_data(tmp_path / "data")
    whole = (data / "valid.en.gz").read_bytes()
    (data / "valid.en.gz").write_bytes(whole[: len(whole) - 10])
    message = start_error("translation/train.py", data, tmp_path / "run")
    assert f"--validation_split validation: {data / 'valid.en.gz'} is truncated" in message


def test_text_that_is_not_utf8_names_the_file_and_line(tmp_path):
    data = translation_data(tmp_path / "data")
    (data / "test.de.gz").write_bytes(gzip.compress(b"ein Hund\nK\xf6ln\n"))
    message = start_error("translation/train.py", data, tmp_path / "run")
    assert f"--test_split test: {data / 'test.de.gz'}: line 2 is not UTF-8 text" in message


def test_a_tokenizer_folder_without_tokenizer_json_names_the_file(tmp_path):
    data = translation_data(tmp_path / "data")
    tokenizer = tmp_path / "tokenizer"
    train_tokenizer(PAIRS["de"] + PAIRS["en"], "bpe", vocab_size=60).save_pretrained(tokenizer)
    (tokenizer / "tokenizer.json").unlink()
    message = start_error("translation/train.py", data, tmp_path / "run", "--tokenizer", str(tokenizer))
    assert f"tokenizer folder {tokenizer} has no tokenizer.json" in message and "sentencepiece" not in message


def test_translation_max_tokens_must_hold_max_length():
    with pytest.raises(SystemExit, match=r"--max_tokens 100 is below --max_length 128: .* raise --max_tokens"):
        load_script("translation/train.py").parse_args(["--output_dir", "x", "--max_tokens", "100"])


def test_an_example_longer_than_max_tokens_is_named():
    with pytest.raises(ValueError, match=r"example 2 has 9 tokens, more than max_tokens=8"):
        TokenBatchSampler([3, 4, 9, 2], max_tokens=8)


@pytest.mark.parametrize("script", [LM_SCRIPT, "translation/train.py"])
def test_training_data_too_small_for_one_optimizer_step_stops_before_anything_is_written(tmp_path, script):
    data = lm_data(tmp_path / "data") if script == LM_SCRIPT else translation_data(tmp_path / "data")
    flags = LM_FLAGS if script == LM_SCRIPT else ["--max_tokens", "64", "--max_length", "16"]
    message = start_error(script, data, tmp_path / "run", *flags, "--gradient_accumulation_steps", "1000")
    assert message.startswith("error: the training data cannot fill an optimizer step of --max_tokens ")
    assert (
        "--gradient_accumulation_steps 1000: " in message and "fewer than the 1000 that one optimizer step" in message
    )


def test_the_step_check_counts_the_processes_the_launcher_started(monkeypatch):
    args = SimpleNamespace(max_tokens=8, gradient_accumulation_steps=1)
    check_batches(args, [4] * 6)  # three batches of two examples: enough for one process
    monkeypatch.setenv("WORLD_SIZE", "4")  # as accelerate launch --num_processes 4 sets it
    with pytest.raises(SystemExit, match="6 examples make 3 batches of <= 8 tokens, fewer than the 4"):
        check_batches(args, [4] * 6)


def test_the_same_command_runs_once_the_data_is_fixed(tmp_path):
    data = lm_data(tmp_path / "data", valid=[])
    flags = [*LM_FLAGS, "--max_steps", "2", "--threads", "1"]
    start_error(LM_SCRIPT, data, tmp_path / "run", *flags)
    write_lines(data / "valid.txt", LM_TEXT)
    output = run(LM_SCRIPT, "--data_dir", data, "--output_dir", tmp_path / "run", *TINY_MODEL, *flags)
    assert "test (test)" in output and (tmp_path / "run" / "best").is_dir()


# --- the Trainer scripts share the readers: the same errors -----------------------------------------


def trainer_script_error(monkeypatch, script, *flags):
    """The error message with which the Trainer script `script` stops for the command line `flags`."""
    monkeypatch.setattr(sys, "argv", [script, *map(str, flags), "--report_to", "none"])
    with pytest.raises(SystemExit) as stop:
        load_script(script).main()
    return str(stop.value.code)


def test_run_clm_names_a_tokenizer_folder_without_tokenizer_json(tmp_path, monkeypatch):
    checkpoint = tmp_path / "checkpoint"
    train_tokenizer(LM_TEXT, "word", vocab_size=60).save_pretrained(checkpoint)
    (checkpoint / "tokenizer.json").unlink()
    flags = ["--model_name_or_path", checkpoint, "--data_dir", lm_data(tmp_path / "data"), "--output_dir", tmp_path]
    message = trainer_script_error(monkeypatch, "language-modeling/run_clm.py", *flags, "--do_train")
    assert f"tokenizer folder {checkpoint} has no tokenizer.json" in message


def test_run_translation_names_an_empty_validation_split(tmp_path, monkeypatch):
    data = translation_data(tmp_path / "data")
    for lang in PAIRS:
        (data / f"valid.{lang}.gz").write_bytes(gzip.compress(b""))
    tokenizer = train_tokenizer(PAIRS["de"] + PAIRS["en"], "bpe", vocab_size=60, add_eos=True)
    checkpoint = tmp_path / "checkpoint"
    sizes = {"d_model": 16, "ffn_dim": 32, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
    build_model("talk", tokenizer, True, **sizes).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    flags = ["--model_name_or_path", checkpoint, "--data_dir", data, "--output_dir", tmp_path / "run", "--do_eval"]
    message = trainer_script_error(monkeypatch, "translation/run_translation.py", *flags)
    assert message.startswith("error: --validation_split validation: ") and message.endswith(
        "valid.en.gz: no records, the split is empty"
    )
