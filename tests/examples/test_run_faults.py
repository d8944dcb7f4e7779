"""Faults that machines and users inflict on a run's output folder, injected one at a time: kills
during a save, each file of a run folder damaged or deleted, two runs on one folder, a resume with
nothing to resume or with other settings, a fresh start on an old run, bad arguments.

Each must end in a clear error that names the file or argument and the fix, or in a documented
recovery (a warning, and the run goes on). The runs are in-process (no start-up cost) copies of one
tiny finished run; only the kill by a real SIGKILL starts a process of the script.
"""

import importlib.util
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from common import checkpoints, file_checks, run_folder, run_outputs, signals, training_state
from common.atomic_files import existing_dir
from common.records import read_log
from common.tokenizer import train_tokenizer
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

from .conftest import EXAMPLES, LANGUAGE_MODELING, TRANSLATION, load_script, requires_data

SCRIPT = "language-modeling/train.py"
# Dropout on, so that a resume with other random numbers shows in the losses; a save after every
# step, so that a kill at a random moment mostly lands in one.
ARGS = [*LANGUAGE_MODELING, *"--model_type transformer --dropout 0.3 --max_steps 6 --eval_every 3".split()]
ARGS += ["--save_every", "1", "--test_split", ""]
# One thread in every run, killed or resumed, in this process or another: the script's own choice
# follows the machine's load, and a product summed over another number of threads differs in its
# last bits, which a resumed step would show.
ARGS += ["--threads", "1"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
OFFLINE["TALK_HF_BACKEND"] = "torch"  # the compiled kernels have their own tests


def train(output_dir, *flags, script=SCRIPT, args=ARGS, tensorboard=True):
    """The script's `main` in this process on `output_dir`, with `flags` after the common ones;
    `tensorboard=False` hides an installed TensorBoard, as a run without the `examples` extra has none.
    torch's thread count, which the script sets, is restored afterwards."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(signals, "stop_on_terminal_stop", lambda: None)  # leave pytest's signal handlers alone
        if not tensorboard:
            find_spec = importlib.util.find_spec
            patch.setattr(
                importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else find_spec(name, *a)
            )
        for name, value in OFFLINE.items():
            patch.setenv(name, value)
        try:
            load_script(script).main([*map(str, args), "--output_dir", str(output_dir), *map(str, flags)])
        finally:
            torch.set_num_threads(threads)


def records(output_dir):
    """The records of `output_dir/log.jsonl` without their (timing) seconds."""
    lines = (Path(output_dir) / "log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in lines]


def steps(output_dir):
    return [r["step"] for r in records(output_dir) if "loss" in r]


def snapshot(folder):
    """{relative path: bytes} of every file in `folder` but the lock's."""
    lock_files = (run_folder.LOCK, run_folder.LOCK_OWNER)
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in lock_files]
    return {p.relative_to(folder): p.read_bytes() for p in files}


def truncate(path):
    """Cut `path` to about half its bytes, never at a line end: a torn write."""
    data = path.read_bytes()
    keep = len(data) // 2
    if data[:keep].endswith(b"\n"):
        keep -= 1
    path.write_bytes(data[:keep])


def change_bytes(path):
    """Invert 8 bytes in the middle of `path`, keeping its size: damage that leaves it readable."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(255 - b for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny LM run of 6 steps, saved after each; tests work on copies (`run_copy`). It logs to
    TensorBoard (`train/`) where that is installed."""
    folder = tmp_path_factory.mktemp("finished") / "run"
    train(folder)
    return folder


@pytest.fixture(scope="module")
def finished_run_without_tensorboard(tmp_path_factory):
    """`finished_run` as a machine without TensorBoard (no `examples` extra) trains it: no `train/`."""
    folder = tmp_path_factory.mktemp("finished_without_tensorboard") / "run"
    train(folder, tensorboard=False)
    return folder


# The tests whose folder's contents depend on TensorBoard run on both kinds of run.
BOTH_RUNS = pytest.mark.parametrize("which_run", ["finished_run", "finished_run_without_tensorboard"])


@pytest.fixture
def run_copy(finished_run, tmp_path):
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


# --- arguments ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("translation/train.py", ["--max_train_samples", "0"], "--max_train_samples must be >= 1, not 0"),
        ("language-modeling/train.py", ["--max_eval_samples", "-1"], "--max_eval_samples must be >= 1"),
        ("translation/train.py", ["--max_length", "0"], "--max_length must be >= 1, not 0"),
        ("translation/train.py", ["--num_beams", "0"], "--num_beams must be >= 1"),
        ("language-modeling/train.py", ["--block_size", "0"], "--block_size must be >= 1"),
        ("translation/train.py", ["--source_lang", "de", "--target_lang", "de"], "both 'de': translation needs two"),
        ("translation/train.py", ["--vocab_size", "4"], "--vocab_size must be at least 5, not 4: 4 ids go to"),
        ("translation/train.py", ["--lr", "-0.001"], "--lr must be a number > 0, not -0.001"),
        ("translation/train.py", ["--lr", "nan"], "--lr must be a number > 0, not nan"),
        ("translation/train.py", ["--epochs", "0"], "--epochs must be a number > 0"),
        ("translation/train.py", ["--weight_decay", "-0.1"], "--weight_decay must be a number >= 0"),
        ("translation/train.py", ["--clip_norm", "-1"], "--clip_norm must be a number >= 0"),
        ("translation/train.py", ["--dropout", "1"], "--dropout must be in \\[0, 1\\)"),
        ("translation/train.py", ["--max_steps", "-5"], "--max_steps must be >= 1"),
        ("translation/train.py", ["--warmup_steps", "-1"], "--warmup_steps must be >= 0"),
        ("translation/train.py", ["--eval_batch_size", "0"], "--eval_batch_size must be >= 1"),
        ("translation/train.py", ["--min_frequency", "0"], "--min_frequency must be >= 1"),
        ("translation/train.py", ["--seed", "-1"], "--seed must be in \\[0, 2\\*\\*32\\)"),
        ("translation/train.py", ["--d_model", "30", "--heads", "4"], "is no valid model: .*30 must be divisible"),
        ("translation/train.py", ["--model_type", "slicenet", "--heads", "2"], "--heads do not apply to slicenet"),
        ("translation/train.py", ["--resume", "--overwrite_output_dir"], "give one of them"),
        ("translation/train.py", ["--allow_changed_args"], "--allow_changed_args applies to --resume only"),
    ],
)
def test_bad_arguments_are_named_before_any_work(tmp_path, script, flags, message):
    with pytest.raises(SystemExit, match=f"^error: .*{message}"):
        load_script(script).parse_args(["--output_dir", str(tmp_path / "run"), *flags])


@requires_data
def test_limits_that_the_training_data_cannot_meet_are_named(tmp_path):
    """BPE keeps every character of the text: a smaller --vocab_size cannot be met. A --max_length
    that no pair fits leaves nothing to train on."""
    pattern = r"--vocab_size 20 is below the (\d+) tokens .* 4 special tokens and the \d+ characters .* (\1) or more"
    with pytest.raises(SystemExit, match=pattern) as error:
        train(tmp_path / "vocabulary", "--vocab_size", 20, script="translation/train.py", args=TRANSLATION)
    minimum = int(re.search(pattern, str(error.value)).group(1))
    assert minimum > 20
    with pytest.raises(SystemExit, match="no training pair is at most --max_length 2 tokens long"):
        train(tmp_path / "length", "--max_length", 2, script="translation/train.py", args=TRANSLATION)
    with pytest.raises(SystemExit, match="--lr must be a number > 0"):
        train(tmp_path / "lr", "--lr", -0.001)
    assert not (tmp_path / "lr").exists()  # refused before anything was written


# --- fresh start, resume ------------------------------------------------------------------------------


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize("case", ["state deleted", "never saved", "no folder"])
def test_resume_with_nothing_to_resume_stops_and_changes_nothing(run_copy, case):
    if case == "no folder":
        shutil.rmtree(run_copy)
    else:  # "never saved": what a run killed before its first save leaves
        for name in ("state",) if case == "state deleted" else ("state", "last", "best"):
            shutil.rmtree(run_copy / name)
    before = snapshot(run_copy) if run_copy.exists() else None
    pattern = f"--resume: nothing to resume in {run_copy}: {run_copy / 'state'} does not exist.*--overwrite_output_dir"
    with pytest.raises(SystemExit, match=pattern):
        train(run_copy, "--resume")
    assert (snapshot(run_copy) if run_copy.exists() else None) == before


def run_outputs_named(folder):
    """The outputs of the finished run in `folder` (with a `state.old/`) as a fresh start's refusal names them."""
    names = ["args.json", "best/", "environment.json", "last/", "log.jsonl", "state/", "state.old/", "tokenizer/"]
    return ", ".join(names + (["train/"] if (folder / "train").exists() else []))


@requires_data
@pytest.mark.slow
@BOTH_RUNS
def test_a_fresh_start_refuses_a_run_folder_unless_told_to_overwrite_it(which_run, request, tmp_path, capsys):
    finished = request.getfixturevalue(which_run)
    run_copy = Path(shutil.copytree(finished, tmp_path / "run"))
    tensorboard = which_run == "finished_run"  # where it is installed
    (run_copy / "state.old").mkdir()  # what a kill between two renames leaves
    (run_copy / "notes.txt").write_text("not the run's")
    (run_copy / "hub").mkdir()  # a name the scripts use with --push_to_hub only: not this run's
    before = snapshot(run_copy)
    names = re.escape(run_outputs_named(run_copy))
    pattern = f"--output_dir {run_copy} holds a run \\({names}\\): add --resume .* --overwrite_output_dir"
    with pytest.raises(SystemExit, match=pattern):
        train(run_copy, tensorboard=tensorboard)
    assert snapshot(run_copy) == before
    capsys.readouterr()
    train(run_copy, "--overwrite_output_dir", tensorboard=tensorboard)
    assert "left in place, since no run recorded them: hub/, notes.txt" in capsys.readouterr().out
    assert not (run_copy / "state.old").exists() and (run_copy / "notes.txt").read_text() == "not the run's"
    assert (run_copy / "hub").is_dir()
    assert (run_copy / "train").exists() == (tensorboard and run_outputs.tensorboard_installed())
    assert records(run_copy) == records(finished)  # the new run alone, not mixed with the old one
    for empty in (tmp_path / "empty", tmp_path / "locked before"):  # folders without a run's outputs
        empty.mkdir()
        run_folder.take_lock(empty).release()
        run_folder.start_fresh(empty, {"args.json", "state"}, overwrite=False)


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--overwrite_output_dir"]])
def test_a_fresh_start_writes_over_no_folder_that_no_run_recorded(tmp_path, flags):
    """A user's own `state/` and `train/`, or a run folder from before `outputs.json`: named, never deleted."""
    folder = tmp_path / "run"
    for name in ("state", "train"):
        (folder / name).mkdir(parents=True)
        (folder / name / "mine.txt").write_text("the user's")
    before = snapshot(folder)
    names = "state/, train/" if run_outputs.tensorboard_installed() else "state/"  # train/: TensorBoard's
    pattern = f"--output_dir {folder} holds {names}, which no run of these scripts recorded in outputs.json"
    with pytest.raises(SystemExit, match=pattern + ".* Move or delete them yourself"):
        train(folder, *flags)
    assert snapshot(folder) == before


@requires_data
@pytest.mark.slow
def test_a_resume_keeps_the_settings_and_the_tokenizer_of_the_run(run_copy, finished_run):
    """Other training data would train another tokenizer: only 16 of 800 ids meant the same token."""
    settings = (run_copy / "args.json").read_text()
    with pytest.raises(SystemExit, match=r"--max_train_samples 120 then, 60 now.* add --allow_changed_args"):
        train(run_copy, "--resume", "--max_train_samples", 60, "--max_steps", 7)
    assert (run_copy / "args.json").read_text() == settings and steps(run_copy) == steps(finished_run)
    train(run_copy, "--resume", "--max_train_samples", 60, "--max_steps", 7, "--allow_changed_args")
    assert steps(run_copy) == list(range(1, 8))
    vocabulary = AutoTokenizer.from_pretrained(finished_run / "tokenizer").get_vocab()
    assert AutoTokenizer.from_pretrained(run_copy / "last").get_vocab() == vocabulary
    assert (run_copy / "args.json").read_text() == settings  # the first start's
    changed = json.loads((run_copy / "resumes.jsonl").read_text().splitlines()[-1])["changed"]
    assert changed.pop("output_dir") == {"start": str(finished_run), "now": str(run_copy)}  # a copy, moved
    assert changed == {"max_steps": {"start": 6, "now": 7}, "max_train_samples": {"start": 120, "now": 60}}


@requires_data
@pytest.mark.slow
def test_allow_changed_args_goes_on_without_a_readable_args_json_but_not_with_another_model(run_copy, capsys):
    truncate(run_copy / "args.json")
    train(run_copy, "--resume", "--max_steps", 7, "--allow_changed_args")
    assert f"warning: {run_copy / 'args.json'} does not read as JSON" in capsys.readouterr().err
    assert json.loads((run_copy / "args.json").read_text())["max_steps"] == 7  # this command's settings now
    assert steps(run_copy)[-1] == 7
    pattern = f"state saved in {run_copy / 'state'} does not load into this run .* resume with the settings"
    with pytest.raises(SystemExit, match=pattern):  # a wider model cannot take the saved weights
        train(run_copy, "--resume", "--max_steps", 8, "--allow_changed_args", "--d_model", 48)


# --- one run per folder -------------------------------------------------------------------------------

HOLD_LOCK = "import sys; from common.run_folder import take_lock; lock = take_lock(sys.argv[1]); print('held'); input()"


@requires_data
@pytest.mark.slow
def test_a_second_run_on_a_folder_in_use_is_refused_and_a_killed_run_blocks_nothing(run_copy):
    command = [sys.executable, "-u", "-c", HOLD_LOCK, str(run_copy)]
    holder = subprocess.Popen(command, cwd=EXAMPLES, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(run_copy)
        pattern = f"--output_dir {run_copy} is in use by another run \\(process {holder.pid} on host .*, started "
        with pytest.raises(SystemExit, match=pattern):
            train(run_copy, "--resume", "--max_steps", 7)
        assert snapshot(run_copy) == before
    finally:
        holder.kill()  # SIGKILL: no clean-up runs
        holder.wait()
    run_folder.take_lock(run_copy).release()  # the system let go of the killed holder's lock


def test_only_the_main_process_locks_and_checks_the_folder(tmp_path):
    """Under Accelerate the other processes wait for the main one's verdict and touch nothing."""
    other_process = SimpleNamespace(is_main_process=False)
    args = SimpleNamespace(output_dir=str(tmp_path / "run"), resume=True)
    assert run_folder.open_run(other_process, args) is None and not (tmp_path / "run").exists()


# --- log.jsonl ----------------------------------------------------------------------------------------


def test_a_torn_last_log_line_is_dropped_with_a_warning(tmp_path, capsys):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    assert read_log(path) == [{"step": 1, "loss": 2.0}]
    assert f"warning: {path} line 2 is cut short" in capsys.readouterr().err


@requires_data
@pytest.mark.slow
def test_a_log_damaged_before_its_last_line_stops_the_resume_naming_the_line(run_copy):
    path = run_copy / "log.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:12] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(SystemExit, match=f"{path} line 3 is not a log record .* Repair or delete that line"):
        train(run_copy, "--resume", "--max_steps", 7)


def test_a_resume_record_starts_on_its_own_line_after_a_torn_one(tmp_path):
    path = tmp_path / "resumes.jsonl"
    path.write_text('{"time": "x"}\n{"ti')
    run_folder.append_json_line(path, {"time": "y"})
    assert path.read_text().splitlines()[-1] == '{"time": "y"}'


# --- every file of a run folder damaged -------------------------------------------------------------------

ERROR, WARNING, FINE = "error", "warning", "fine"
# (file, damage, outcome, what the message says after the file's path): a resume for one more step.
# Fine: the file is not needed to resume and is written again (last/ by the save after the step).
DAMAGES = [
    ("args.json", "truncated", ERROR, "does not read as JSON .* add --allow_changed_args"),
    ("args.json", "deleted", ERROR, "is missing: it records the settings"),
    ("environment.json", "truncated", FINE, None),
    (".lock.json", "truncated", FINE, None),
    ("log.jsonl", "truncated", WARNING, "line \\d+ is cut short"),
    ("log.jsonl", "deleted", FINE, None),
    ("tokenizer/tokenizer.json", "truncated", ERROR, "does not load .* last/ and best/ in .* hold copies"),
    ("tokenizer/tokenizer.json", "deleted", ERROR, "is missing: it holds the tokenizer"),
    ("tokenizer/tokenizer_config.json", "truncated", ERROR, "does not load .* copy tokenizer.json and"),
    ("tokenizer", "deleted", FINE, None),  # as in a run started before it was saved: last/ has a copy
    *[
        (
            f"state/{name}",
            damage,
            ERROR,
            f"{'does not load' if damage == 'truncated' else 'is missing'}.* keeps no "
            "earlier one. Start it anew: the same command without --resume, with --overwrite_output_dir",
        )
        for name in ("pytorch_model.bin", "optimizer.bin", "scheduler.bin", "progress.json")
        for damage in ("truncated", "deleted")
    ],
    ("state/optimizer.bin", "changed", ERROR, "does not load \\(its member .* is damaged \\(CRC mismatch\\)\\)"),
    ("outputs.json", "truncated", WARNING, "does not read as a list of outputs .* It is written anew"),
    ("outputs.json", "deleted", WARNING, "is missing: it records what the run wrote"),
    ("state/random_states_0.pkl", "truncated", WARNING, "does not load .* will not reproduce an uninterrupted one"),
    ("state/random_states_0.pkl", "deleted", WARNING, "is missing: .* will not reproduce an uninterrupted one"),
    *[(f"last/{name}", "truncated", FINE, None) for name in file_checks.TOKENIZER_FILES],
    *[(f"last/{name}", "truncated", FINE, None) for name in ("config.json", "model.safetensors")],
    *[(f"last/{name}", "truncated", FINE, None) for name in ("generation_config.json", "training_state.json")],
    ("last/model.safetensors", "deleted", FINE, None),
    *[
        (f"best/{name}", "truncated", WARNING, "does not load .* the best model so far is lost")
        for name in (*file_checks.TOKENIZER_FILES, "config.json", "model.safetensors", "generation_config.json")
    ],
    ("best/training_state.json", "truncated", WARNING, "does not load .* the best model so far is lost"),
    ("best/model.safetensors", "deleted", WARNING, "is missing: the best model so far is lost"),
    ("best/model.safetensors", "changed", WARNING, "does not match the SHA-256 .* the best model so far is lost"),
]


@requires_data
@BOTH_RUNS
def test_the_damages_cover_every_file_of_a_run_folder(which_run, request):
    """Every file a resume may read; TensorBoard's event files (`train/`) it never reads."""
    run = request.getfixturevalue(which_run)
    files = {p.relative_to(run) for p in run.rglob("*") if p.is_file() and p.stat().st_size}
    assert {str(p) for p in files if p.parts[0] != "train"} == {n for n, damage, *_ in DAMAGES if damage == "truncated"}
    assert any(p.parts[0] == "train" for p in files) == (
        which_run == "finished_run" and run_outputs.tensorboard_installed()
    )


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize("name, damage, outcome, message", DAMAGES, ids=[f"{n} {d}" for n, d, *_ in DAMAGES])
def test_a_damaged_file_is_named_or_the_run_recovers(run_copy, finished_run, capsys, name, damage, outcome, message):
    path = run_copy / name
    if damage == "truncated":
        truncate(path)
    elif damage == "changed":
        change_bytes(path)
    else:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if outcome == ERROR:
        with pytest.raises(SystemExit, match=f"^error: {re.escape(str(path))} {message}"):
            train(run_copy, "--resume", "--max_steps", 7)
        return
    train(run_copy, "--resume", "--max_steps", 7)
    warnings = capsys.readouterr().err
    if outcome == WARNING:
        assert re.search(f"warning: {re.escape(str(path))} {message}", warnings), warnings
    else:
        assert "warning:" not in warnings, warnings
    assert steps(run_copy)[-1] == 7
    for folder in ("last", "best"):  # whole again: written by the resumed run
        assert file_checks.saved_model_problem(run_copy / folder) is None
    vocabulary = AutoTokenizer.from_pretrained(finished_run / "tokenizer").get_vocab()
    assert AutoTokenizer.from_pretrained(run_copy / "last").get_vocab() == vocabulary  # the run's own


def test_a_damaged_state_points_to_the_save_before_it_when_there_is_one(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state.old").mkdir()
    torch.save({"weights": torch.ones(4)}, tmp_path / "state" / "pytorch_model.bin")
    truncate(tmp_path / "state" / "pytorch_model.bin")
    message = training_state.state_failure(tmp_path / "state", RuntimeError("PytorchStreamReader failed"))
    assert message.startswith(f"{tmp_path / 'state' / 'pytorch_model.bin'} does not load")
    assert f"{tmp_path / 'state.old'} holds the save before it" in message


# --- kills during a save ----------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for a SIGKILL at one point of a save: nothing after it runs (no handler catches it)."""


def killing_at(monkeypatch, point):
    """Make the `point`-th file operation of this process (0-based; os.replace, shutil.rmtree,
    torch.save) raise `Killed` before it runs."""
    count = itertools.count()

    def wrap(function):
        def operation(*args, **kwargs):
            if next(count) == point:
                raise Killed
            return function(*args, **kwargs)

        return operation

    for owner, name in ((os, "replace"), (shutil, "rmtree"), (torch, "save")):
        monkeypatch.setattr(owner, name, wrap(getattr(owner, name)))


def test_a_kill_at_any_point_of_a_checkpoint_leaves_a_complete_save(tmp_path):
    """`last/` and `state/` after a kill at each file operation of the save of step 2: step 1's or
    step 2's, complete, and the next save (step 3) completes over what the kill left."""
    accelerator = Accelerator()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    progress = checkpoints.Progress()
    tokenizer = train_tokenizer(["a b c"], "word", 10)

    def checkpoint(output_dir, step):
        with torch.no_grad():
            model.lm_head.weight.fill_(step)
        progress.step = step
        checkpoints.save_model(accelerator, model, tokenizer, output_dir / "last", {"step": step})
        training_state.save_state(accelerator, output_dir / "state", progress)

    def saved_step(output_dir):
        """The step of the saved state, checked against the weights it holds and last/."""
        last = existing_dir(output_dir / "last")
        assert file_checks.saved_model_problem(last) is None
        training_state.load_state(accelerator, output_dir, progress)
        assert torch.equal(model.lm_head.weight, torch.full_like(model.lm_head.weight, progress.step))
        assert json.loads((last / "training_state.json").read_text())["step"] in (progress.step, progress.step + 1)
        return progress.step

    checkpoint(tmp_path / "base", 1)
    for point in itertools.count():
        output_dir = Path(shutil.copytree(tmp_path / "base", tmp_path / f"killed at {point}"))
        with pytest.MonkeyPatch.context() as patch:
            killing_at(patch, point)
            try:
                checkpoint(output_dir, 2)
                killed = False
            except Killed:
                killed = True
        assert saved_step(output_dir) in ((1, 2) if killed else (2,)), point
        checkpoint(output_dir, 3)
        assert saved_step(output_dir) == 3, point
        if not killed:
            break
    assert point > 8  # every rename, deletion and torch.save of both folders was a kill point


@requires_data
@pytest.mark.slow
def test_a_sigkill_at_a_random_moment_costs_only_the_steps_since_the_last_save(tmp_path, finished_run):
    """A real SIGKILL of the script at a random moment after a random step (mostly inside that step's
    save); the resumed run's log equals the uninterrupted run's."""
    chance = random.Random()  # not the global generator, which the in-process runs seed
    step, delay = chance.randint(2, 5), chance.uniform(0, 0.1)  # a step and its save take about 0.1 s
    output_dir = tmp_path / "run"
    command = [sys.executable, str(EXAMPLES / SCRIPT), *ARGS, "--output_dir", str(output_dir)]
    with open(tmp_path / "stderr", "w") as stderr:
        child = subprocess.Popen(command, env={**os.environ, **OFFLINE}, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 240
        while child.poll() is None and time.monotonic() < deadline:
            if (output_dir / "log.jsonl").exists() and step in steps_so_far(output_dir):
                time.sleep(delay)
                break
            time.sleep(0.005)
    finally:  # the kill, also when the wait above fails: the script never outlives the test
        child.kill()
        child.wait()
    assert child.returncode in (0, -signal.SIGKILL), (tmp_path / "stderr").read_text()[-3000:]
    train(output_dir, "--resume")
    assert records(output_dir) == records(finished_run), f"killed {delay:.3f} s after step {step} was logged"


def steps_so_far(output_dir):
    """The steps in a log that another process is writing (its last line may be unfinished)."""
    found = re.findall(r'^\{"step": (\d+), "epoch"', (output_dir / "log.jsonl").read_text(), flags=re.M)
    return {int(s) for s in found}
