"""Token batching, collators, LM blocks, tokenizers, the label-smoothed loss, atomic folders, evaluation
pacing by training time and the Hub upload."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from common import checkpoints, clock, hub, loop_settings, options, records, signals
from common.atomic_files import existing_dir, replace_dir
from common.averaging import WeightAverage
from common.batching import (
    PackedLMCollator,
    TokenBatchSampler,
    TranslationCollator,
    collate_lm,
    lm_blocks,
    lm_documents,
    pack_documents,
)
from common.checkpoints import Progress
from common.clock import SlowdownDetector, TrainingClock, crossed_multiple
from common.data import split_name
from common.losses import token_loss
from common.models import build_config, build_model, our_config
from common.tokenizer import get_tokenizer, train_tokenizer
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

import talk_hf

from .conftest import LANGUAGE_MODELING, load_script, read_log, requires_data

LENGTHS = torch.randint(1, 40, (300,), generator=torch.Generator().manual_seed(1)).tolist()


def test_token_batches_respect_the_budget_and_cover_the_data():
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert all(len(b) * max(LENGTHS[i] for i in b) <= 100 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
    # Greedy filling: adding the next example of the sorted order would overflow.
    assert sum(len(b) for b in batches) / len(batches) > 3


def test_token_batches_are_a_function_of_seed_and_epoch():
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, seed=3)
    first = list(sampler)
    assert list(sampler) == first
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and len(second) == len(first)
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_token_batches_drop_the_tail_to_whole_steps():
    full = len(TokenBatchSampler(LENGTHS, max_tokens=100))
    sampler = TokenBatchSampler(LENGTHS, max_tokens=100, multiple_of=7)
    assert len(sampler) == full - full % 7 and len(list(sampler)) == len(sampler)


def test_token_batches_reject_what_cannot_fit():
    with pytest.raises(ValueError, match="raise max_tokens"):
        TokenBatchSampler([5, 50], max_tokens=40)
    with pytest.raises(ValueError, match="fewer than"):
        TokenBatchSampler([5, 5], max_tokens=40, multiple_of=2)


def test_translation_collator_shifts_targets_behind_the_start_token():
    batch = TranslationCollator(pad_token_id=0, decoder_start_token_id=2)(
        [{"source": [5, 6, 2], "target": [7, 2], "index": 4}, {"source": [8, 2], "target": [9, 10, 2], "index": 1}]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 2], [8, 2, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["decoder_input_ids"].tolist() == [[2, 7, 0], [2, 9, 10]]
    assert batch["labels"].tolist() == [[7, 2, -100], [9, 10, 2]]
    assert batch["index"].tolist() == [4, 1]


def test_lm_blocks_predict_every_token_once():
    lines = [[3, 4, 5], [], [6, 7, 8, 9]]
    stream = [3, 4, 5, 1, 1, 6, 7, 8, 9, 1]  # eos = 1 after every line
    blocks = lm_blocks(lines, eos_token_id=1, block_size=3)
    assert blocks.shape == (3, 4)
    batch = collate_lm(list(blocks))
    assert batch["labels"].flatten().tolist() == stream[1:10]
    assert batch["input_ids"].flatten().tolist() == stream[:9]
    with pytest.raises(ValueError, match="do not fill one block"):
        lm_blocks([[3]], eos_token_id=1, block_size=8)


def test_lm_documents_keep_lines_whole_unless_longer_than_a_row():
    lines = [[3, 4, 5], [], [6, 7, 8, 9, 10, 11]]
    assert lm_documents(lines, eos_token_id=1, max_length=4) == [[3, 4, 5, 1], [6, 7, 8, 9], [9, 10, 11, 1]]


def test_packed_rows_hold_every_document_whole_within_the_row_length():
    rows = pack_documents(LENGTHS, 64)
    assert sorted(i for row in rows for i in row) == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in row) <= 64 for row in rows)
    # Best fit decreasing leaves little space: fewer rows than one more than the tokens need, on these lengths.
    assert len(rows) <= math.ceil(sum(LENGTHS) / 64) + 1
    assert pack_documents([3, 5, 2, 4], 7) == [[1, 2], [3, 0]]  # best fit: the 3 fills the 4's row, the 2 the 5's
    with pytest.raises(ValueError, match=r"document 1 has 9 tokens: each must hold 1 to 8"):
        pack_documents([3, 9], 8)
    with pytest.raises(ValueError, match=r"document 0 has 0 tokens"):
        pack_documents([0], 8)


def test_packed_collator_restarts_positions_and_predicts_within_documents():
    batch = PackedLMCollator(pad_token_id=0, row_length=6)([[[5, 6, 7], [8, 9]], [[4]]])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0], [4, 0, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]]
    assert batch["labels"].tolist() == [[6, 7, -100, 9, -100, -100], [-100] * 6]


@pytest.mark.parametrize("model_type", ["talk", "transformer"])
def test_a_packed_batch_gives_each_document_the_logits_it_has_alone(model_type):
    """Our models and the GPT-2 baseline read the collator's documents from position_ids alone."""
    tokenizer = train_tokenizer(["a b c d e f g h"] * 4, "word", vocab_size=40, min_frequency=1)
    model = build_model(model_type, tokenizer, False, d_model=16, ffn_dim=32, heads=2, decoder_layers=1).eval()
    documents = [[5, 6, 7], [8, 9], [6, 5, 9, 7]]
    batch = PackedLMCollator(tokenizer.pad_token_id, row_length=10)([documents])
    with torch.no_grad():
        logits = model(batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        start = 0
        for document in documents:
            alone = model(torch.tensor([document]), use_cache=False).logits[0]
            torch.testing.assert_close(logits[start : start + len(document)], alone, rtol=1e-5, atol=1e-5)
            start += len(document)


def test_label_smoothed_loss_matches_its_definition():
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    loss, count = token_loss(logits, labels, label_smoothing=0.0)
    assert count == 8
    torch.testing.assert_close(loss, F.cross_entropy(logits[labels != -100], labels[labels != -100], reduction="sum"))
    smoothed, _ = token_loss(logits, labels, label_smoothing=0.1)
    log_probs = logits[labels != -100].log_softmax(-1)
    nll = -log_probs.gather(1, labels[labels != -100, None]).sum()
    torch.testing.assert_close(smoothed, 0.9 * nll + 0.1 * (-log_probs.mean(-1)).sum())


def test_bpe_tokenizer_round_trips_raw_text_and_reloads(tmp_path):
    texts = ["Zwei junge Männer sind im Freien.", "Two young, white males are outside near many bushes."] * 20
    tokenizer = train_tokenizer(texts, "bpe", vocab_size=120, add_eos=True)
    ids = tokenizer(texts[1])["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 0
    assert tokenizer.decode(ids, skip_special_tokens=True) == texts[1]
    tokenizer.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path)(texts[1])["input_ids"] == ids


def test_word_tokenizer_maps_rare_words_to_unk():
    tokenizer = train_tokenizer(["the cat sat", "the dog sat"], "word", vocab_size=100, min_frequency=2)
    assert tokenizer.convert_ids_to_tokens(tokenizer("the cat sat")["input_ids"]) == ["the", "<unk>", "sat"]


def test_replace_dir_never_leaves_nothing(tmp_path):
    final, tmp = tmp_path / "last", tmp_path / "last.tmp"
    tmp.mkdir()
    (tmp / "v").write_text("1")
    replace_dir(tmp, final)
    tmp.mkdir()
    (tmp / "v").write_text("2")
    replace_dir(tmp, final)
    assert (final / "v").read_text() == "2" and not tmp.exists() and existing_dir(final) == final
    final.rename(tmp_path / "last.old")  # as if killed between the two renames
    assert (existing_dir(final) / "v").read_text() == "2"
    assert existing_dir(tmp_path / "never") is None


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
def test_saves_are_on_the_disk_before_they_are_renamed_into_place(tmp_path, monkeypatch):
    """A power cut may lose what the system still caches: every file of a new folder, and the new
    folder itself, is flushed (fsync) before the rename that publishes it, and the parent folder (the
    rename) before `replace_dir` returns; a file written atomically likewise."""
    events = []
    flush, replace = os.fsync, os.replace
    monkeypatch.setattr(
        os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or flush(fd)
    )
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", str(a), str(b))) or replace(a, b))
    final, tmp = tmp_path / "state", tmp_path / "state.tmp"
    (tmp / "sub").mkdir(parents=True)
    for name in ("model.bin", "sub/optimizer.bin"):
        (tmp / name).write_text(name)
    (final / "sub").mkdir(parents=True)  # an earlier save, moved aside first
    replace_dir(tmp, final)
    published = events.index(("replace", str(tmp), str(final)))
    flushed_before = {event[1] for event in events[:published] if event[0] == "fsync"}
    assert {str(tmp / "model.bin"), str(tmp / "sub" / "optimizer.bin"), str(tmp / "sub"), str(tmp)} <= flushed_before
    assert ("fsync", str(tmp_path)) in events[published:]
    events.clear()
    records.write_json(tmp_path / "args.json", {"lr": 1e-3})
    temporary = str(tmp_path / "args.json.tmp")
    assert events == [
        ("fsync", temporary),
        ("replace", temporary, str(tmp_path / "args.json")),
        ("fsync", str(tmp_path)),
    ]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_environment_names_the_commit_of_the_package_it_imported(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    (checkout / "talk_hf").mkdir(parents=True)
    init = checkout / "talk_hf" / "__init__.py"
    init.write_text("")
    monkeypatch.setattr(talk_hf, "__file__", str(init))
    assert records.describe_package_source() is None  # not a git checkout: nothing to name

    def git(*arguments):
        command = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t", *arguments]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    assert records.describe_package_source() is None  # a checkout that does not track the package
    git("add", ".")
    git("commit", "-qm", "package")
    assert records.describe_package_source() == {"commit": git("rev-parse", "HEAD"), "modified": False}
    init.write_text("VERSION = 2\n")
    assert records.describe_package_source() == {"commit": git("rev-parse", "HEAD"), "modified": True}


def test_word_tokenizer_ids_have_no_hole_when_the_text_contains_unk():
    tokenizer = train_tokenizer(["a <unk> b", "b c <unk>"], "word", vocab_size=100)
    ids = sorted(tokenizer.get_vocab().values())
    assert ids == list(range(len(tokenizer))) and tokenizer.convert_tokens_to_ids("<unk>") == 3
    assert len(train_tokenizer(["a b c d e f"], "word", vocab_size=6)) == 6


def test_an_existing_tokenizer_is_loaded_not_trained(tmp_path):
    trained = train_tokenizer(["ein hund", "a dog"] * 5, "bpe", vocab_size=40, add_eos=True)
    trained.pad_token = None  # like GPT-2's: the end-of-sequence token stands in
    trained.save_pretrained(tmp_path)
    loaded = get_tokenizer(str(tmp_path), texts=None, kind="bpe", vocab_size=40)
    assert loaded("a dog")["input_ids"] == trained("a dog")["input_ids"]
    assert loaded.pad_token_id == loaded.eos_token_id == 2


@pytest.mark.parametrize(
    "before, after, interval, expected",
    [
        (0.0, 0.9, 1.0, False),
        (0.9, 1.0, 1.0, True),
        (1.0, 1.5, 1.0, False),
        (0.5, 2.5, 1.0, True),
        (2.9, 6.1, 3.0, True),
    ],
)
def test_crossed_multiple_marks_the_step_that_passes_each_interval(before, after, interval, expected):
    assert crossed_multiple(before, after, interval) == expected


def test_push_to_hub_uploads_best_with_our_code(tmp_path, monkeypatch):
    """`--push_to_hub`: create the repository, then upload best/ with the modeling code and auto_map."""
    config = talk_hf.TaLKConfig.from_preset("small", vocab_size=40, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32)
    talk_hf.TaLKForConditionalGeneration(config).save_pretrained(tmp_path / "best")
    calls = []
    monkeypatch.setattr(huggingface_hub, "create_repo", lambda repo_id, **kw: calls.append(("create", repo_id, kw)))

    def upload_folder(repo_id, folder_path, **kw):
        folder = Path(folder_path)
        calls.append(("upload", repo_id, json.loads((folder / "config.json").read_text())["auto_map"]))
        assert (folder / "model.safetensors").exists() and list(folder.glob("modeling_*.py"))

    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    args = SimpleNamespace(push_to_hub=True, hub_model_id="someone/talk-small", output_dir=str(tmp_path))
    hub.upload(Accelerator(cpu=True), args)
    assert [c[:2] for c in calls] == [("create", "someone/talk-small"), ("upload", "someone/talk-small")]
    assert calls[0][2] == {"exist_ok": True}
    assert calls[1][2]["AutoModelForSeq2SeqLM"].endswith("TaLKForConditionalGeneration")
    calls.clear()
    hub.upload(Accelerator(cpu=True), SimpleNamespace(**{**vars(args), "push_to_hub": False}))
    assert calls == []


def test_language_model_evaluation_in_slices_equals_whole_batches(monkeypatch):
    """The LM evaluation bounds its logits by running slices of each batch: same loss, more forwards."""
    script = load_script("language-modeling/train.py")
    config = talk_hf.TaLKLMConfig.from_preset("small", vocab_size=40, d_model=16, decoder_ffn_dim=32)
    model = talk_hf.TaLKForCausalLM(config).eval()
    forwards = []
    model.register_forward_hook(lambda module, inputs, output: forwards.append(inputs[0].shape[0]))
    blocks = list(torch.randint(3, 40, (10, 9), generator=torch.Generator().manual_seed(0)))
    args = SimpleNamespace(eval_batch_size=4)
    with torch.no_grad():
        whole = script.make_evaluate(Accelerator(cpu=True), blocks, args)(model)
        assert forwards == [4, 4, 2]
        forwards.clear()
        monkeypatch.setattr(script, "EVAL_LOGITS_ELEMENTS", 3 * 8 * 40)  # three rows of 8 tokens per slice
        sliced = script.make_evaluate(Accelerator(cpu=True), blocks, args)(model)
    assert forwards == [3, 1, 3, 1, 2]
    assert sliced["valid_loss"] == pytest.approx(whole["valid_loss"], rel=1e-6)


def test_training_clock_counts_everything_between_laps_but_the_pauses(monkeypatch):
    """Batch fetching and waiting on the device count as training; evaluation and saving do not."""
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # the clock reads time.perf_counter
    clock = TrainingClock()
    now[0] += 2.0  # fetch a batch, launch the step
    assert clock.lap() == 2.0
    now[0] += 0.5  # wait for the device, log
    with clock.paused():
        now[0] += 30.0  # evaluate and save
    now[0] += 1.0  # the next step
    assert clock.lap() == 1.5  # the half second before the pause is banked, not lost
    assert clock.lap() == 0.0


def test_training_clock_pauses_nest(monkeypatch):
    """A terminal stop during an evaluation must not bank the time before the evaluation twice."""
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # the clock reads time.perf_counter
    clock = TrainingClock()
    now[0] += 1.0
    with clock.paused():
        now[0] += 10.0
        with clock.paused():
            now[0] += 100.0
        now[0] += 10.0
    now[0] += 2.0
    assert clock.lap() == 3.0


STOPPED_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from common.clock import TrainingClock
from common.signals import stops_off_the_clock
clock = TrainingClock()
with stops_off_the_clock(clock):
    print("ready", flush=True)
    sys.stdin.readline()  # the stop arrives while this waits
print(clock.lap(), flush=True)
"""


@pytest.mark.skipif(
    not hasattr(signal, "SIGTSTP") or not Path("/proc/self/stat").exists(), reason="needs SIGTSTP and /proc"
)
def test_a_terminal_stop_does_not_count_as_training_time():
    """`kill -TSTP` stops a training process; the time until `kill -CONT` is not charged to the budget."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_CHILD, str(examples)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        started = time.perf_counter()  # the child's clock has run for a moment already
        child.send_signal(signal.SIGTSTP)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().split(")")[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the child did not stop"
            time.sleep(0.01)
        time.sleep(1.0)
        child.send_signal(signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        lap = float(child.stdout.readline())
        elapsed = time.perf_counter() - started
        assert child.wait(timeout=10) == 0
    finally:
        child.kill()
    assert lap < elapsed - 0.9  # the second spent stopped is not in the lap
    assert lap > 0.0


ORPHANED_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from common import signals
if sys.argv[2] == "handler":
    signals.stop_on_terminal_stop()
print("ready", flush=True)
sys.stdin.readline()
"""


def _state(pid):
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]


@pytest.mark.skipif(
    not hasattr(signal, "SIGTSTP") or not Path("/proc/self/stat").exists(), reason="needs SIGTSTP and /proc"
)
@pytest.mark.parametrize("handler", ["handler", "default"])
def test_a_terminal_stop_stops_a_run_left_in_its_own_session(handler):
    """A run in an orphaned process group (its own session, as `setsid` leaves it) discards a default
    SIGTSTP; with `stop_on_terminal_stop` it stops, as the scripts' runs must outside the training loop."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    child = subprocess.Popen(
        [sys.executable, "-c", ORPHANED_CHILD, str(examples), handler],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTSTP)
        deadline = time.monotonic() + (10 if handler == "handler" else 1)
        while _state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (_state(child.pid) == "T") == (handler == "handler")
        child.send_signal(signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=10) == 0
    finally:
        child.kill()


@requires_data
@pytest.mark.parametrize("model_type", ["talk", "transformer"])
def test_our_kernels_are_prepared_before_the_training_clock_starts(model_type, tmp_path, monkeypatch):
    """A first-use kernel compile (faked here: the training clock's time source jumps an hour while
    it runs) is not charged to --max_train_minutes; the Transformer baseline does not ask for our
    kernels at all."""
    prepared, jump = [], [0.0]

    def slow_prepare(device, backend=None):
        prepared.append(torch.device(device).type)
        jump[0] += 3600.0
        return "torch"

    monkeypatch.setattr(clock, "time", SimpleNamespace(perf_counter=lambda: time.perf_counter() + jump[0]))
    monkeypatch.setattr(talk_hf.ops, "prepare_backend", slow_prepare)
    monkeypatch.setattr(signals, "stop_on_terminal_stop", lambda: None)  # leave pytest's signal handlers alone
    monkeypatch.setenv("TALK_HF_BACKEND", "torch")
    script = load_script("language-modeling/train.py")
    script.main(
        [
            *LANGUAGE_MODELING,
            "--model_type",
            model_type,
            "--max_steps",
            "2",
            "--test_split",
            "",
            "--output_dir",
            str(tmp_path),
        ]
    )
    steps, _ = read_log(tmp_path)
    assert prepared == (["cpu"] if model_type == "talk" else [])
    assert len(steps) == 2 and steps[-1]["seconds"] < 3600.0  # training time without the hour


def test_weight_average_is_the_mean_of_the_last_snapshots_and_gives_the_weights_back():
    model = torch.nn.Linear(2, 2)
    average = WeightAverage(model, count=2)
    for value in (1.0, 2.0, 4.0):  # the first snapshot drops out
        torch.nn.init.constant_(model.weight, value)
        torch.nn.init.constant_(model.bias, -value)
        average.add()
    torch.nn.init.constant_(model.weight, 7.0)
    with average.swapped_in():
        assert torch.equal(model.weight, torch.full((2, 2), 3.0)) and torch.equal(model.bias, torch.full((2,), -3.0))
    assert torch.equal(model.weight, torch.full((2, 2), 7.0)) and torch.equal(model.bias, torch.full((2,), -4.0))
    restored = WeightAverage(model, count=2)
    restored.load_state_dict(average.state_dict())
    restored.add()  # still holds at most two: the 2.0 snapshot drops out
    with restored.swapped_in():
        assert torch.equal(model.weight, torch.full((2, 2), 5.5))


@pytest.mark.parametrize("script", ["translation/train.py", "language-modeling/train.py"])
def test_help_shows_every_default_and_the_presets(script, capsys):
    module = load_script(script)
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    text = capsys.readouterr().out
    options = text.split("\noptions:", 1)[1]
    blocks = re.split(r"\n  (?=-)", options)[1:]  # one block per option: its line and its help
    assert len(blocks) > 30
    for block in blocks:
        name = block.split()[0]
        if name not in ("-h,", "--output_dir"):  # --output_dir is required
            assert "(default" in " ".join(block.split()), block
    assert "--preset NAME" in text and "small" in text


class _Vocabulary(SimpleNamespace):
    """What `build_model` reads of a tokenizer: its length and special ids."""

    def __len__(self):
        return 50


def test_slicenet_is_a_translation_model_type_with_its_own_size_flags():
    translation, language_modeling = load_script("translation/train.py"), load_script("language-modeling/train.py")
    assert translation.parse_args(["--output_dir", "x", "--model_type", "slicenet"]).model_type == "slicenet"
    with pytest.raises(SystemExit):  # not a choice of the LM script: SliceNet has no decoder-only form
        language_modeling.parse_args(["--output_dir", "x", "--model_type", "slicenet"])
    tokenizer = _Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    with pytest.raises(ValueError, match="--ffn_dim and --heads do not apply to slicenet"):
        build_model("slicenet", tokenizer, True, ffn_dim=64, heads=2)
    config = our_config("slicenet", tokenizer, True, d_model=48, encoder_layers=1, dropout=0.2)
    assert (config.model_type, config.d_model, config.encoder_layers, config.dropout) == ("slicenet", 48, 1, 0.2)
    assert config.vocab_size == 50 and config.decoder_start_token_id == 2


def test_config_overrides_set_fields_after_the_preset_and_are_checked():
    args = load_script("translation/train.py").parse_args(
        ["--output_dir", "x", "--model_type", "slicenet", "--config_overrides", "final_layer_norm=true,dropout=0.25"]
    )
    tokenizer = _Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    sizes = dict(d_model=48, encoder_layers=1, decoder_layers=1)
    model = build_model("slicenet", tokenizer, True, config_overrides=args.config_overrides, **sizes)
    assert model.config.final_layer_norm is True and model.config.dropout == 0.25
    assert model.model.decoder.final_norm is not None
    with pytest.raises(ValueError, match="final_layer_nrm"):  # transformers: not a field of the configuration
        build_model("slicenet", tokenizer, True, config_overrides="final_layer_nrm=true", **sizes)
    with pytest.raises(ValueError, match="dropout must be a probability"):  # checked as a new configuration
        build_model("slicenet", tokenizer, True, config_overrides="dropout=1.5", **sizes)


def test_the_crash_of_the_resume_tests_is_a_test_hook_not_an_option(monkeypatch):
    """`TALK_HF_TEST_STOP_AFTER_STEPS` (see test_train_scripts.py) is read by the loop; no flag sets it."""
    with pytest.raises(SystemExit):  # argparse: unrecognized arguments
        load_script("translation/train.py").parse_args(["--output_dir", "x", "--stop_after_steps", "3"])
    monkeypatch.delenv(loop_settings.STOP_AFTER_STEPS, raising=False)
    assert loop_settings.stop_after_steps_hook() is None
    monkeypatch.setenv(loop_settings.STOP_AFTER_STEPS, "7")
    assert loop_settings.stop_after_steps_hook() == 7
    for value in ("0", "-1", "seven"):
        monkeypatch.setenv(loop_settings.STOP_AFTER_STEPS, value)
        with pytest.raises(SystemExit, match=f"^error: {loop_settings.STOP_AFTER_STEPS} .* >= 1, not '{value}'"):
            loop_settings.stop_after_steps_hook()


@pytest.mark.parametrize(
    "flags, dropout",
    [
        ([], 0.0),  # the recipe's: --preset small trains without dropout
        (["--model_type", "transformer"], 0.0),  # the baseline too (it takes TaLK's sizes)
        (["--model_type", "light_conv"], 0.0),
        (["--dropout", "0.2"], 0.2),  # a given --dropout wins
        (["--preset", "iwslt14-de-en"], 0.3),  # the preset's own
        (["--model_type", "slicenet"], 0.5),  # SliceNet's `small` keeps its configuration's
    ],
)
def test_the_recipe_trains_the_small_preset_without_dropout(flags, dropout):
    args = load_script("translation/train.py").parse_args(["--output_dir", "x", *flags])
    tokenizer = _Vocabulary(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    config = build_config(args.model_type, tokenizer, True, args.preset, **options.model_sizes(args))
    assert getattr(config, "dropout", None) == dropout
    assert args.dropout == (dropout if "--dropout" in flags else None)  # args.json records what was given


def _help(script, capsys):
    with pytest.raises(SystemExit):
        load_script(script).parse_args(["--help"])
    return capsys.readouterr().out


def _option_help(text, name):
    """The help of option `name` in `--help` output, on one line."""
    block = re.split(r"\n  (?=-)", text.split("\noptions:", 1)[1])
    return " ".join(next(b for b in block if b.split() and b.split()[0].rstrip(",") == name).split())


@pytest.mark.parametrize("script", ["translation/train.py", "language-modeling/train.py"])
def test_help_says_what_the_defaults_mean(script, capsys):
    text = _help(script, capsys)
    assert "the run's folder" in _option_help(text, "--output_dir")
    mixed = _option_help(text, "--mixed_precision")
    assert "accelerate config" in mixed and "(default: None)" not in mixed
    threads = _option_help(text, "--threads")
    assert "torch.set_num_threads" in threads and "(default: on a CPU run, one per core that other" in threads


def test_the_help_describes_the_main_job_paced_by_minutes(capsys):
    text = _help("translation/train.py", capsys)
    description = " ".join(text.split("\noptions:", 1)[0].split())
    assert "--max_train_minutes 10 --eval_every_minutes 5" in description
    assert "after every 5 minutes" in description and "bentrevett/multi30k" in description


@pytest.mark.parametrize(
    "script, encoder_decoder", [("translation/train.py", True), ("language-modeling/train.py", False)]
)
def test_preset_offers_each_model_type_its_own_presets(script, encoder_decoder, capsys):
    preset = _option_help(_help(script, capsys), "--preset")
    talk = "talk, dynamic_conv, light_conv, transformer: "
    if encoder_decoder:
        assert talk + "cnn-dm, cnn-dm-deep, iwslt14-de-en, small, wmt-big;" in preset
        assert "slicenet: paper-section-3.1, small, t2t-slicenet_1," in preset
    else:
        assert talk + "small, wikitext-103" in preset and "slicenet" not in preset
    assert preset.endswith("(default: small)")  # after every model type, a registered family's too
    module = load_script(script)
    with pytest.raises(SystemExit, match="--preset t2t-slicenet_1 is not a preset of --model_type talk: give one of"):
        module.parse_args(["--output_dir", "x", "--preset", "t2t-slicenet_1"])
    if encoder_decoder:
        assert module.parse_args(["--output_dir", "x", "--model_type", "slicenet", "--preset", "t2t-slicenet_1tiny"])
        with pytest.raises(SystemExit, match="not a preset of --model_type slicenet"):
            module.parse_args(["--output_dir", "x", "--model_type", "slicenet", "--preset", "wmt-big"])


def test_threads_must_be_positive():
    module = load_script("translation/train.py")
    assert module.parse_args(["--output_dir", "x", "--threads", "1"]).threads == 1
    with pytest.raises(SystemExit, match="--threads must be >= 1, not 0"):
        module.parse_args(["--output_dir", "x", "--threads", "0"])
    assert "threads" in options.MAY_CHANGE_ON_RESUME  # how fast, not what, a run trains


def test_slowdown_detector_warns_once_when_steps_suddenly_slow_down():
    """Synthetic step times: 0.15 s steps with noise, then 13x slower (another process on the CPU)."""
    detector = SlowdownDetector(factor=4.0, window=10, warmup=20)
    usual = [0.15 * (1 + 0.3 * ((i * 7) % 5 - 2) / 2) for i in range(100)]  # 0.105 .. 0.195 s
    assert [detector.add(s) for s in usual] == [None] * 100
    assert all(detector.add(s) is None for s in [0.6] * 4)  # a few slow steps: the window's median holds
    warnings = [detector.add(s) for s in [2.0] * 30]
    assert sum(w is not None for w in warnings) == 1  # once, not at every slow step
    message = next(w for w in warnings if w is not None)
    assert "this run's usual 0.15 s" in message and "--threads 1" in message
    assert all(detector.add(s) is None for s in usual[:30])  # back to normal: quiet, and armed again
    assert sum(detector.add(s) is not None for s in [2.0] * 30) == 1


def test_slowdown_detector_stays_quiet_for_slow_starts_and_steady_runs():
    detector = SlowdownDetector(factor=4.0, window=10, warmup=20)
    assert all(detector.add(s) is None for s in [5.0] * 5 + [0.2] * 200)  # slow first steps (warm-up)
    steady = SlowdownDetector()
    assert all(steady.add(1.0 + 0.5 * (i % 2)) is None for i in range(1000))  # alternating 1.0 / 1.5 s


@pytest.mark.parametrize("before, after", [((1, 1), (2, 1)), ((2, 1), (1, 2)), ((2, 3), (3, 1)), ((4, 1), (3, 2))])
@pytest.mark.parametrize("done_per_process", [0, 3, 6, 7])
def test_progress_carries_the_epochs_position_over_to_another_process_count(before, after, done_per_process):
    """Processes take an epoch's batches in turns: after P processes did k each, batches 0..k*P-1 are
    done. A resume with P' processes and accumulation A skips a prefix of those that whole steps
    cover and trains the rest of them again (fewer than one step's P' * A)."""
    (processes, _), (new_processes, accumulation) = before, after
    progress = Progress(batches_in_epoch=done_per_process, processes=processes)
    repeated = progress.carry_over(new_processes, accumulation)
    done = done_per_process * processes
    skipped = progress.batches_in_epoch * new_processes
    assert progress.processes == new_processes and progress.batches_in_epoch % accumulation == 0
    assert skipped + repeated == done and 0 <= repeated < new_processes * accumulation
    unchanged = Progress(batches_in_epoch=6, processes=2)
    assert unchanged.carry_over(2, 3) == 0 and unchanged.batches_in_epoch == 6


def test_progress_bar_counts_the_budget_in_minutes():
    progress = Progress(step=0, train_seconds=0.0)
    bar = records.progress_bar(progress, max_steps=9150, budget_seconds=600, disable=False)
    assert bar.total == 10 and "0.0/10.0 min" in str(bar) and "9150" not in str(bar)
    bar.close()
    steps = records.progress_bar(progress, max_steps=9150, budget_seconds=math.inf, disable=False)
    assert steps.total == 9150
    steps.close()


def test_training_log_moves_the_minute_bar_by_training_time(tmp_path):
    accelerator = SimpleNamespace(is_main_process=True, log=lambda *a, **k: None)
    progress = Progress()
    with records.TrainingLog(
        accelerator, tmp_path / "log.jsonl", progress=progress, max_steps=9150, log_every=1000, budget_seconds=600
    ) as log:
        for _ in range(3):
            progress.advance(batches=1, tokens=10, seconds=90.0)
            log.step(progress, loss=1.0, lr=1e-3, tokens=10)
        assert log.bar.n == pytest.approx(4.5) and "4.5/10.0 min" in str(log.bar) and "step=3" in str(log.bar)
        progress.advance(batches=1, tokens=10, seconds=700.0)  # the last step ends past the budget
        log.step(progress, loss=1.0, lr=1e-3, tokens=10)
        assert log.bar.n == 10


def test_saves_write_no_progress_bars(tmp_path, capfd):
    tokenizer = train_tokenizer(["ein hund", "a dog"], kind="word", vocab_size=20, min_frequency=1)
    model = build_model("talk", tokenizer, True, d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1)
    accelerator = Accelerator(cpu=True)
    capfd.readouterr()
    checkpoints.save_model(accelerator, model, tokenizer, tmp_path / "best", {"step": 1})
    assert "Writing model shards" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # as it was: only the saves are quiet
    model.save_pretrained(tmp_path / "plain")  # what the loop used to print at every save
    assert "Writing model shards" in capfd.readouterr().err


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


@pytest.mark.parametrize(
    ("flags", "lr"),
    [
        ([], 1e-3),  # blocks of 256: the rate searched there
        (["--block_size", "512"], 1e-3),
        (["--block_size", "724"], 1e-3),  # just nearer 256 than 2,048 on a log scale
        (["--block_size", "725"], 2e-3),
        (["--block_size", "2048"], 2e-3),  # the rate searched at blocks of 2,048
        (["--block_size", "16384"], 2e-3),
        (["--block_size", "2048", "--lr", "5e-4"], 5e-4),  # a given rate wins
    ],
)
def test_language_model_learning_rate_follows_the_block_size(tmp_path, flags, lr):
    """The LM script's default --lr is the searched rate of the nearer searched block size, resolved
    before the run starts so that args.json records the rate that ran."""
    script = load_script("language-modeling/train.py")
    args = script.parse_args(["--output_dir", str(tmp_path / "run"), "--max_tokens", "16384", *flags])
    assert args.lr == lr


def test_language_model_help_states_the_learning_rate_rule(capsys):
    with pytest.raises(SystemExit):
        load_script("language-modeling/train.py").parse_args(["--help"])
    assert "0.001 at 256, 0.002 at 2,048 tokens per block" in " ".join(capsys.readouterr().out.split())
