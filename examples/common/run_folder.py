"""The output folder of a training run: one run at a time, a start that fits what the folder holds,
and the settings and the tokenizer the run started with.

What the folder holds, and which of its files are read how: examples/README.md ("The run folder").
The other jobs on it have their own modules: `atomic_files` (writes that a kill leaves whole),
`run_outputs` (the manifest of what the run wrote), `training_state` (state/), `file_checks`.

* One run per folder: the main process holds an OS-level lock on `output_dir/.lock` for the whole
  run (the system drops it however the process ends, so a killed run blocks nobody) and writes who
  holds it into `output_dir/.lock.json`, which a second run names in its error (a `.lock` or
  `.lock.json` that no run wrote is refused, or replaced with `--overwrite_output_dir`). The other
  processes of an Accelerate run take no lock: they wait for the main process's verdict.
* A fresh start refuses a folder that holds a run's outputs unless `--overwrite_output_dir`, which
  deletes them first (only what the run's manifest records: `run_outputs`); `--resume` needs a
  saved state, settings that match the run's `args.json` (`options.MAY_CHANGE_ON_RESUME` lists what
  may differ without `--allow_changed_args`; the process count may not: it sets the global batch)
  and a `log.jsonl` whose only damage is a torn last line.
* `args.json` is written at the first start and kept; each resume appends what it changed to
  `resumes.jsonl`. The tokenizer is saved into `output_dir/tokenizer` at the first start, before
  training, and a resume uses it whatever data it is given.
"""

import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

import filelock
from accelerate.utils import broadcast_object_list
from transformers import AutoTokenizer

from . import run_outputs
from .atomic_files import append_json_line, existing_dir, remove_entry, write_json
from .file_checks import TOKENIZER_FILES, file_problem
from .folder_saves import full_disk_is_an_error, save_folder
from .messages import fail, first_line, warn
from .records import read_log, write_log
from .run_settings import check_settings, resume_record, run_settings
from .tokenizer import SPECIAL_TOKENS, get_tokenizer
from .training_state import check_resumable

LOCK, LOCK_OWNER = ".lock", ".lock.json"


# --- one run per folder ---------------------------------------------------------------------------


def take_lock(folder, *, overwrite=False):
    """Hold the lock of the output folder `folder` and record this process as its holder.

    Returns the held `filelock.FileLock` (release it when the run ends; the system releases it when
    the process dies). Raises SystemExit naming the holder when another process holds it, and
    naming the file when `.lock` or `.lock.json` is not a run's (`foreign_lock_files`), unless
    `overwrite` (`--overwrite_output_dir`): such files are then replaced, and named.
    """
    folder = Path(folder)
    foreign = foreign_lock_files(folder)
    if foreign and (not overwrite or any(p.is_dir() and not p.is_symlink() for p in foreign)):
        fail(
            f"--output_dir {folder} holds {run_outputs.listed(foreign)}, which no run of these scripts wrote, and "
            f"the run would write over it (the names of its lock, {LOCK} and {LOCK_OWNER}). Move it elsewhere, or "
            "for a new run give --overwrite_output_dir to replace a file there"
        )
    for path in foreign:
        print(f"--overwrite_output_dir: replacing {path}, which no run wrote", flush=True)
        remove_entry(path)  # a link is removed itself: what it points to is never written
    lock = filelock.FileLock(str(folder / LOCK), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        fail(
            f"--output_dir {folder} is in use by another run ({lock_holder(folder)}): one run per output folder "
            "at a time. Wait for that run to end or stop it, or give another --output_dir"
        )
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    write_json(folder / LOCK_OWNER, {**holder, "command": shlex.join(sys.argv)})
    return lock


def foreign_lock_files(folder):
    """The entries `.lock` and `.lock.json` of `folder` that a run did not write: a run's `.lock` is an
    empty file (not a link), its `.lock.json` a JSON object of exactly the holder's fields. In the
    folder of a run (its manifest records outputs) a `.lock.json` file that no longer reads as a
    holder's record is that run's own, damaged: it is written again, not refused."""
    lock, owner = Path(folder) / LOCK, Path(folder) / LOCK_OWNER
    foreign = []
    if os.path.lexists(lock) and (lock.is_symlink() or not lock.is_file() or lock.stat().st_size > 0):
        foreign.append(lock)
    runs_record = owner.is_file() and (is_holder_record(owner) or bool(run_outputs.recorded_outputs(folder)[0]))
    if os.path.lexists(owner) and (owner.is_symlink() or not runs_record):
        foreign.append(owner)
    return foreign


def is_holder_record(path):
    """Whether the file `path` holds what `take_lock` writes: {pid, host, started, command}."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and set(record) == {"pid", "host", "started", "command"}


def lock_holder(folder):
    """Who holds the lock of `folder`, as its side file `.lock.json` says."""
    path = Path(folder) / LOCK_OWNER
    try:
        holder = json.loads(path.read_text())
        return f"process {holder['pid']} on host {holder['host']}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"a process that {path} does not name"


# --- a fresh start or a resume --------------------------------------------------------------------


def open_run(accelerator, args, train_data=None):
    """Lock `args.output_dir` for this run and check that what it holds fits the start: a fresh one
    (an empty folder, or `--overwrite_output_dir`, which deletes the old run's outputs) writes
    `args.json`; `--resume` needs a saved state and the run's settings (`run_settings` of `args`, the
    accelerator and the training columns `train_data`, {column: [str, ...]}; see `check_settings`).

    The main process does the work; every process raises the same SystemExit when it fails.
    Returns the held lock on the main process, None on the others.
    """
    lock, error = None, None
    if accelerator.is_main_process:
        try:
            with full_disk_is_an_error(args.output_dir):
                precision, processes = accelerator.mixed_precision, accelerator.num_processes
                settings = run_settings(args, processes, mixed_precision=precision, train_data=train_data)
                lock = _open_on_main_process(Path(args.output_dir), args, settings)
        except SystemExit as stop:
            error = stop.code
    error = broadcast_object_list([error])[0]
    if error is not None:
        raise SystemExit(error)
    return lock


def _open_on_main_process(folder, args, settings):
    """`open_run`'s work: the lock, then the checks; the lock is let go again when a check fails.
    `settings`: this start's `run_settings`."""
    if args.resume and not folder.is_dir():
        check_resumable(folder)  # fails: nothing to resume (and no folder made for the lock)
    folder.mkdir(parents=True, exist_ok=True)
    # First: a run that is busy in the folder is the news, whatever the folder holds.
    lock = take_lock(folder, overwrite=args.overwrite_output_dir)
    try:
        outputs = run_outputs.planned_outputs(args)
        if args.resume:
            check_resumable(folder)
            changed = check_settings(folder, settings, allow_changed=args.allow_changed_args)
            record_outputs_of_resume(folder, outputs)
            if (folder / "log.jsonl").exists():
                write_log(folder / "log.jsonl", read_log(folder / "log.jsonl"))  # drops a torn last line
            append_json_line(folder / "resumes.jsonl", resume_record(changed))
        else:
            start_fresh(folder, outputs, overwrite=args.overwrite_output_dir)
            write_json(folder / "args.json", settings)
    except BaseException:
        lock.release()
        raise
    return lock


def start_fresh(folder, outputs, *, overwrite):
    """Refuse a folder where this start would write over what no run recorded, or that holds a
    run's outputs (unless `overwrite`: they are deleted, and what else the folder holds is named);
    then record `outputs` (the names this start writes) in the folder's manifest."""
    recorded, manifest_problem = run_outputs.recorded_outputs(folder)
    unknown = run_outputs.unrecorded(folder, outputs)
    if unknown:
        why = f" ({manifest_problem})" if manifest_problem else ""
        fail(
            f"--output_dir {folder} holds {run_outputs.listed(unknown)}, which no run of these scripts recorded in "
            f"{run_outputs.MANIFEST}{why}, and this run would write over them. They may be your own files, or the "
            f"outputs of a run from before {run_outputs.MANIFEST} was kept: --overwrite_output_dir deletes only what "
            "a run recorded. Move or delete them yourself, or choose another --output_dir"
        )
    old_run = run_outputs.entries(folder, recorded - {run_outputs.MANIFEST})
    if old_run and not overwrite:
        fail(
            f"--output_dir {folder} holds a run ({run_outputs.listed(old_run)}): add --resume to continue it, "
            "--overwrite_output_dir to delete its outputs and start anew, or choose another folder"
        )
    left = run_outputs.delete_recorded(folder)
    if old_run and left:
        print(
            f"--overwrite_output_dir: deleted the outputs of the run in {folder}; left in place, since no run "
            f"recorded them: {run_outputs.listed(left)}",
            flush=True,
        )
    run_outputs.record(folder, outputs)


def record_outputs_of_resume(folder, outputs):
    """Record `outputs` (the names this resume writes) in the folder's manifest; refuse where this
    resume would write over an entry that no run recorded. A lost manifest is written anew."""
    recorded, problem = run_outputs.recorded_outputs(folder)
    if problem is None and not recorded:
        problem = f"{folder / run_outputs.MANIFEST} is missing"
    if problem is not None:
        warn(
            f"{problem}: it records what the run wrote, which --overwrite_output_dir may delete. It is written anew "
            f"with what this run writes: {', '.join(sorted(outputs))}"
        )
    else:
        unknown = run_outputs.unrecorded(folder, outputs)
        if unknown:
            fail(
                f"--output_dir {folder} holds {run_outputs.listed(unknown)}, which the run did not write (its "
                f"{run_outputs.MANIFEST} does not record them), and this resume would write over them. Move them "
                "elsewhere, then resume again"
            )
    run_outputs.record(folder, outputs)


# --- the run's tokenizer --------------------------------------------------------------------------


def new_tokenizer(args, texts, *, add_eos=False):
    """The tokenizer of a fresh start: `--tokenizer`, or one trained on `texts` (a list of str) and
    checked against `--vocab_size`. It writes nothing, so the scripts make it before the run folder
    is touched: a tokenizer that cannot be had leaves no run behind."""
    try:
        tokenizer = get_tokenizer(
            args.tokenizer, texts, args.tokenizer_kind, args.vocab_size, args.min_frequency, add_eos
        )
    except ValueError as error:  # get_tokenizer's errors name the tokenizer and what it lacks
        fail(str(error))
    if args.tokenizer is None:
        check_vocabulary_size(tokenizer, args)
    return tokenizer


def run_tokenizer(accelerator, args, tokenizer):
    """The tokenizer of the run in `args.output_dir`.

    On `--resume` (`tokenizer` is None then), the one saved at the run's first start
    (`saved_tokenizer`). Otherwise `tokenizer` (`new_tokenizer`'s), saved into
    `output_dir/tokenizer` atomically before training starts.
    """
    if args.resume:
        return saved_tokenizer(args.output_dir)

    def write(tmp):
        if accelerator.is_main_process:
            tokenizer.save_pretrained(tmp)

    save_folder(accelerator, Path(args.output_dir) / "tokenizer", write)
    return tokenizer


def check_vocabulary_size(tokenizer, args):
    """Refuse a trained tokenizer larger than `--vocab_size`: BPE keeps every character of the
    text besides the special tokens, whatever the size asked for."""
    if len(tokenizer) > args.vocab_size:
        specials = len(SPECIAL_TOKENS)
        fail(
            f"--vocab_size {args.vocab_size} is below the {len(tokenizer)} tokens that a {args.tokenizer_kind} "
            f"tokenizer of this training text cannot do without: {specials} special tokens and the "
            f"{len(tokenizer) - specials} characters of the text. Give --vocab_size {len(tokenizer)} or more"
        )


def saved_tokenizer(output_dir):
    """The tokenizer the run in `output_dir` trains with: `tokenizer/`, saved at its first start, or
    where that folder is missing (a run started before it was saved) the copy in `last/`.

    Raises SystemExit naming what is wrong with it, and where a copy is.
    """
    folder = Path(output_dir) / "tokenizer"
    found = existing_dir(folder) or existing_dir(Path(output_dir) / "last")
    problem = f"{folder} is missing" if found is None else tokenizer_problem(found)
    if problem is None:
        try:
            return AutoTokenizer.from_pretrained(found)
        except Exception as error:  # tokenizers and transformers raise many kinds
            problem = f"{found} does not load ({first_line(error)})"
    fail(
        f"{problem}: it holds the tokenizer the run trains with, which a resume needs. last/ and best/ in "
        f"{output_dir} hold copies: copy {' and '.join(TOKENIZER_FILES)} of one of them into {folder}, then resume "
        "again"
    )


def tokenizer_problem(folder):
    """'<file> is missing' or '<file> does not load (<why>)' for the tokenizer files of `folder`, or None."""
    for name in TOKENIZER_FILES:
        path = Path(folder) / name
        if not path.is_file():
            return f"{path} is missing"
        problem = file_problem(path)
        if problem is not None:
            return f"{path} does not load ({problem})"
    return None
