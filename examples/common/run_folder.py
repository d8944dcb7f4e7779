"""The output folder of a training run: one run at a time, a start that fits what the folder holds,
the settings and the tokenizer the run started with, and loading its saved state.

What a run's folder (`--output_dir`) holds:

    state/      Accelerate state (model, optimizer, scheduler, RNGs, `Progress`): resume from here
    last/       the latest model + tokenizer, `save_pretrained` format
    best/       the model + tokenizer with the best validation metric so far
    tokenizer/  the run's tokenizer, saved before training: a resume uses it, not a new one
    log.jsonl   one JSON record per logged step and per evaluation
    args.json   the command-line settings of the run, defaults included, and its process count
                (`num_processes`; of its first start)
    resumes.jsonl  one line per resume: when, where, and the settings it changed
    environment.json  where it trained (CPU and its vector instructions, caches, threads,
                processes, GPUs, library versions, the git commit of the talk_hf it imported; of
                its latest start): a fixed training-time budget buys as many steps as the machine
                gives
    test_results.json  the test metrics of best/, when the script evaluates the test split
    .lock, .lock.json  the lock that keeps a second run out while one runs, and who holds it

Every folder is written beside its final name, flushed to disk (`fsync`) and then renamed into
place, so a run killed at any moment, or a machine that loses power, leaves the previous complete
version (`X` or, if it died between two renames, `X.old`); files are written the same way, except
`log.jsonl`, which is appended to (a resume drops a torn last line) and flushed at each save of
`state/`. A kill or a power cut costs at most the steps since the last save.

* One run per folder: the main process holds an OS-level lock on `output_dir/.lock` for the whole
  run (the system drops it however the process ends, so a killed run blocks nobody) and writes who
  holds it into `output_dir/.lock.json`, which a second run names in its error. The other
  processes of an Accelerate run take no lock: they wait for the main process's verdict.
* A fresh start refuses a folder that holds a run's outputs unless `--overwrite_output_dir`, which
  deletes them first; `--resume` needs a saved state, settings that match the run's `args.json`
  (`options.MAY_CHANGE_ON_RESUME` lists what may differ without `--allow_changed_args`; the process
  count may not: it sets the global batch) and a `log.jsonl` whose only damage is a torn last line.
* `args.json` is written at the first start and kept; each resume appends what it changed to
  `resumes.jsonl`. The tokenizer is saved into `output_dir/tokenizer` at the first start, before
  training, and a resume uses it whatever data it is given.
* Loading the saved state names the file that does not load and says what the user can do; a lost
  random-number state or a damaged `best/` is a warning, and the run goes on.
"""

import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

import filelock
import safetensors
import torch
from accelerate.utils import broadcast_object_list
from accelerate.utils import load as accelerate_load
from transformers import AutoTokenizer

from .options import MAY_CHANGE_ON_RESUME, START_FLAGS, fail
from .tokenizer import SPECIAL_TOKENS, get_tokenizer

LOCK, LOCK_OWNER = ".lock", ".lock.json"
# What a run writes into its folder (`train` is the TensorBoard log), with the `.tmp` and `.old` of
# atomic writes: what makes a folder hold a run, and what --overwrite_output_dir deletes.
RUN_OUTPUTS = frozenset(
    {"state", "last", "best", "tokenizer", "hub", "train"}
    | {"log.jsonl", "args.json", "environment.json", "resumes.jsonl", "test_results.json"}
)
# Options whose values are paths: the same folder spelled another way is the same setting.
PATH_OPTIONS = frozenset({"output_dir", "data_dir", "tokenizer"})
# What `save_pretrained` of our tokenizers (all fast ones) writes, and a reload needs.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def warn(message):
    """Print `warning: message` to stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def flush_to_disk(path):
    """`fsync` the file or folder `path`: its bytes, or a folder's entries (the renames into it),
    are on the disk when this returns, not only in the system's cache."""
    if os.name == "nt" and Path(path).is_dir():
        return  # Windows opens no folder to flush it (NTFS journals the renames)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def flush_tree(folder):
    """`flush_to_disk` every file and folder under `folder`, then `folder` itself."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*"), key=lambda p: (p.is_dir(), -len(p.parts))):  # files, then deepest folders
        flush_to_disk(path)
    flush_to_disk(folder)


def write_text_atomically(path, text):
    """Write `text` beside `path`, flush it and rename it into place: a kill or a power cut leaves the
    old or the new file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    flush_to_disk(tmp)
    os.replace(tmp, path)
    flush_to_disk(path.parent)


def write_json(path, data):
    """`data` as indented JSON into `path`, atomically."""
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")


def append_json_line(path, record):
    """Append `record` as one line, starting a new line if a kill left the last one unfinished."""
    path = Path(path)
    torn = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(record) + "\n")
    flush_to_disk(path)


def replace_dir(tmp, final):
    """Move the complete folder `tmp` to `final`, keeping the previous `final` until that worked;
    `tmp`'s files are on the disk before the first rename, and the renames when this returns."""
    tmp, final = Path(tmp), Path(final)
    old = final.with_name(final.name + ".old")
    flush_tree(tmp)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    flush_to_disk(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def existing_dir(path):
    """`path`, or `path.old` when a run died between the two renames of `replace_dir`; else None."""
    for candidate in (Path(path), Path(str(path) + ".old")):
        if candidate.is_dir():
            return candidate
    return None


# --- one run per folder ---------------------------------------------------------------------------


def take_lock(folder):
    """Hold the lock of the output folder `folder` and record this process as its holder.

    Returns the held `filelock.FileLock` (release it when the run ends; the system releases it when
    the process dies). Raises SystemExit naming the holder when another process holds it.
    """
    folder = Path(folder)
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


def lock_holder(folder):
    """Who holds the lock of `folder`, as its side file `.lock.json` says."""
    path = Path(folder) / LOCK_OWNER
    try:
        holder = json.loads(path.read_text())
        return f"process {holder['pid']} on host {holder['host']}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"a process that {path} does not name"


# --- a fresh start or a resume --------------------------------------------------------------------


def open_run(accelerator, args):
    """Lock `args.output_dir` for this run and check that what it holds fits the start: a fresh one
    (an empty folder, or `--overwrite_output_dir`, which deletes the old run's outputs) writes
    `args.json`; `--resume` needs a saved state and the run's settings (see `check_settings`).

    The main process does the work; every process raises the same SystemExit when it fails.
    Returns the held lock on the main process, None on the others.
    """
    lock, error = None, None
    if accelerator.is_main_process:
        try:
            lock = _open_on_main_process(Path(args.output_dir), args, run_settings(args, accelerator.num_processes))
        except SystemExit as stop:
            error = stop.code
    error = broadcast_object_list([error])[0]
    if error is not None:
        raise SystemExit(error)
    return lock


def run_settings(args, num_processes):
    """What `args.json` records and a resume must match: the command-line settings `args` and the
    number of training processes, which sets the global batch (processes x accumulation x
    micro-batch) and the share of an epoch each process trains."""
    return {**vars(args), "num_processes": num_processes}


def _open_on_main_process(folder, args, settings):
    """`open_run`'s work: the lock, then the checks; the lock is let go again when a check fails.
    `settings`: this start's `run_settings`."""
    if args.resume and not folder.is_dir():
        check_resumable(folder)  # fails: nothing to resume (and no folder made for the lock)
    folder.mkdir(parents=True, exist_ok=True)
    lock = take_lock(folder)  # first: a run that is busy in the folder is the news, whatever the folder holds
    try:
        if args.resume:
            check_resumable(folder)
            changed = check_settings(folder, settings, allow_changed=args.allow_changed_args)
            if (folder / "log.jsonl").exists():
                write_log(folder / "log.jsonl", read_log(folder / "log.jsonl"))  # drops a torn last line
            append_json_line(folder / "resumes.jsonl", resume_record(changed))
        else:
            start_fresh(folder, overwrite=args.overwrite_output_dir)
            write_json(folder / "args.json", settings)
    except BaseException:
        lock.release()
        raise
    return lock


def run_outputs(folder):
    """The entries of `folder` that a run wrote (see `RUN_OUTPUTS`), sorted."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.removesuffix(".tmp").removesuffix(".old") in RUN_OUTPUTS)


def start_fresh(folder, *, overwrite):
    """Refuse a folder that holds a run's outputs, or delete them when `overwrite`."""
    outputs = run_outputs(folder)
    if outputs and not overwrite:
        names = ", ".join(p.name + ("/" if p.is_dir() else "") for p in outputs)
        fail(
            f"--output_dir {folder} holds a run ({names}): add --resume to continue it, --overwrite_output_dir "
            "to delete its outputs and start anew, or choose another folder"
        )
    for path in outputs:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_resumable(folder):
    """Refuse `--resume` where there is no saved state to continue from."""
    if existing_dir(Path(folder) / "state") is None:
        fail(
            f"--resume: nothing to resume in {folder}: {Path(folder) / 'state'} does not exist (the run stopped "
            "before its first save, or state/ was deleted). Leave out --resume to start anew, with "
            "--overwrite_output_dir if the folder holds a run's outputs"
        )


def check_settings(folder, settings, *, allow_changed):
    """Compare the settings of this resume (`run_settings`) with the run's `args.json`.

    Returns {option: (saved value, given value)} of the options that differ. Raises SystemExit
    naming those that may not change on resume (`options.MAY_CHANGE_ON_RESUME`), unless
    `allow_changed` (`--allow_changed_args`); then they are only recorded.
    """
    saved = saved_settings(folder, allow_changed=allow_changed)
    if saved is None:  # unreadable, and --allow_changed_args: this command's settings replace it
        write_json(Path(folder) / "args.json", settings)
        return {}
    changed = changed_settings(saved, settings)
    fixed = {name: values for name, values in changed.items() if name not in MAY_CHANGE_ON_RESUME}
    if fixed and not allow_changed:
        listed = "; ".join(
            f"--{name} {json.dumps(old)} then, {json.dumps(new)} now" for name, (old, new) in fixed.items()
        )
        fail(
            f"--resume with settings that differ from the ones {Path(folder) / 'args.json'} recorded at the run's "
            f"start: {listed}. They shape the model, the data, the tokenizer or the optimization, so the resumed "
            "run would not continue the saved one. Give the recorded values, or add --allow_changed_args to "
            "resume with the new ones on purpose"
        )
    return changed


def saved_settings(folder, *, allow_changed):
    """The settings of the run's first start (`args.json`).

    Raises SystemExit when it cannot be read; with `allow_changed` warns and returns None instead.
    """
    path = Path(folder) / "args.json"
    try:
        settings = json.loads(path.read_text())
        problem = None if isinstance(settings, dict) else "holds no settings"
    except FileNotFoundError:
        problem = "is missing"
    except (OSError, ValueError) as error:
        problem = f"does not read as JSON ({error})"
    if problem is None:
        return settings
    if not allow_changed:
        fail(
            f"{path} {problem}: it records the settings the run started with, which a resume must match. Restore "
            "it, or add --allow_changed_args to resume without comparing (args.json then records this command's "
            "settings)"
        )
    warn(f"{path} {problem}: resuming without comparing the settings (--allow_changed_args); it now records these")
    return None


def changed_settings(saved, given):
    """{option: (saved value, given value)} for the options both record that differ (paths compare
    as the folders they name); the start flags (`options.START_FLAGS`) are not settings."""
    given = json.loads(json.dumps(given))  # the values as args.json holds them
    names = sorted((saved.keys() & given.keys()) - START_FLAGS)
    return {name: (saved[name], given[name]) for name in names if not _same_setting(name, saved[name], given[name])}


def _same_setting(name, old, new):
    if old == new:
        return True
    paths = name in PATH_OPTIONS and isinstance(old, str) and isinstance(new, str)
    return paths and os.path.realpath(old) == os.path.realpath(new)


def resume_record(changed):
    """The line a resume adds to `resumes.jsonl`: when, where, and the settings it changed."""
    return {
        "time": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "host": socket.gethostname(),
        "changed": {name: {"start": old, "now": new} for name, (old, new) in changed.items()},
    }


# --- log.jsonl ------------------------------------------------------------------------------------


def read_log(path):
    """The records of a `log.jsonl` ([] when there is none).

    A last line that is not a record is what a run killed while appending leaves: it is dropped
    with a warning (its step lies after the last save, so the resumed run writes it again). Any
    other line that is not a JSON record with a step raises SystemExit naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        problem = _record_problem(line)
        if problem is not None and number == len(lines):
            warn(f"{path} line {number} is cut short (a run was killed while writing it): dropped")
        elif problem is not None:
            fail(
                f"{path} line {number} is not a log record ({problem}): only the last line can be torn by a kill, "
                "so something else changed this file. Repair or delete that line, then resume again"
            )
        else:
            records.append(json.loads(line))
    return records


def _record_problem(line):
    """Why `line` is not a log record (a JSON object with an integer step), or None."""
    try:
        record = json.loads(line)
    except ValueError as error:
        return str(error)
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return "no step"
    return None


def write_log(path, records):
    """Write `records` as the whole of the `log.jsonl` at `path`, atomically."""
    write_text_atomically(path, "".join(json.dumps(record) + "\n" for record in records))


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
    if accelerator.is_main_process:
        folder = Path(args.output_dir) / "tokenizer"
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save_pretrained(tmp)
        replace_dir(tmp, folder)
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
            problem = f"{found} does not load ({_first_line(error)})"
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


# --- checking saved files -------------------------------------------------------------------------


def file_problem(path):
    """Why the file `path` does not load, or None: JSON must parse, safetensors must hold all the
    data their header promises, torch files (.bin, .pkl, .pt) must unpickle. Other files pass."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            with safetensors.safe_open(str(path), "pt") as f:
                f.keys()
        elif path.suffix in (".bin", ".pkl", ".pt"):
            torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # each reader raises its own kinds
        return _first_line(error)
    return None


def damaged_file(folder):
    """'<file> does not load (<why>)' for the first file of `folder` that does not (`file_problem`), or None."""
    for path in sorted(Path(folder).iterdir()):
        problem = file_problem(path) if path.is_file() else None
        if problem is not None:
            return f"{path} does not load ({problem})"
    return None


def missing_file(folder, names):
    """'<file> is missing' for the first of the files `names` that `folder` lacks, or None."""
    for name in names:
        if not (Path(folder) / name).is_file():
            return f"{Path(folder) / name} is missing"
    return None


def saved_model_problem(folder):
    """What is wrong with the `save_pretrained` folder of a model and its tokenizer (`save_model`):
    a file that does not load, or one it cannot do without; None when it is whole."""
    folder = Path(folder)
    problem = damaged_file(folder)
    if problem is not None:
        return problem
    index = folder / "model.safetensors.index.json"  # a sharded checkpoint lists its shards
    weights = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else []
    return missing_file(folder, ["config.json", *(weights or ["model.safetensors"]), *TOKENIZER_FILES])


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- the saved training state ---------------------------------------------------------------------


def load_state(accelerator, output_dir, *, custom_objects):
    """`accelerator.load_state` of the run's saved state; returns the folder it loaded.

    `custom_objects` is how many objects the caller registered for checkpointing: their files must
    be there. Warns when this process's random-number state is lost (training goes on, but draws
    other numbers). Raises SystemExit naming the file that does not load, with what the user can do.
    """
    state_dir = existing_dir(Path(output_dir) / "state")
    if state_dir is None:
        check_resumable(output_dir)  # fails: nothing to resume
    warn_if_random_state_lost(accelerator, state_dir)
    missing = missing_file(state_dir, [f"custom_checkpoint_{index}.pkl" for index in range(custom_objects)])
    if missing is not None:
        fail(unusable_state(state_dir, missing))
    try:
        accelerator.load_state(state_dir)
    except Exception as error:  # torch, pickle and accelerate raise many kinds
        fail(state_failure(state_dir, error))
    return state_dir


def warn_if_random_state_lost(accelerator, state_dir):
    """Accelerate resumes without a word when a process's random state does not load: say so."""
    path = Path(state_dir) / f"random_states_{accelerator.process_index}.pkl"
    try:
        accelerate_load(path)
    except FileNotFoundError:
        problem = "is missing"
    except Exception as error:  # what loading a damaged pickle raises varies
        problem = f"does not load ({_first_line(error)})"
    else:
        return
    warn(
        f"{path} {problem}: this process resumes with other random numbers (dropout, sampling) than the "
        "interrupted run would have drawn, so the resumed run will not reproduce an uninterrupted one exactly. "
        "Training goes on"
    )


def state_failure(state_dir, error):
    """The message for a saved state in `state_dir` that `load_state` could not load with `error`."""
    state_dir = Path(state_dir)
    if isinstance(error, FileNotFoundError) and error.filename:
        problem = f"{error.filename} is missing"
    else:
        problem = damaged_file(state_dir)
    if problem is None:  # every file reads: the run's settings no longer fit the saved state
        return (
            f"the state saved in {state_dir} does not load into this run ({_first_line(error)}), although its "
            "files read back whole: resume with the settings of the run's args.json"
        )
    return unusable_state(state_dir, problem)


def unusable_state(state_dir, problem):
    """The message for the save in `state_dir` that `problem` (a missing or damaged file) spoils:
    what the user can do depends on whether an earlier save is left."""
    state_dir = Path(state_dir)
    older = state_dir.with_name("state.old")
    if state_dir.name == "state" and older.is_dir():
        return (
            f"{problem}, so the save in {state_dir} cannot be resumed. {older} holds the save before it: move "
            f"{state_dir} aside, rename {older} to {state_dir}, and resume again (the steps since that save are "
            "trained again)"
        )
    return (
        f"{problem}, so the save in {state_dir} cannot be resumed, and the run keeps no earlier one. Start it "
        "anew: the same command without --resume, with --overwrite_output_dir (which deletes last/ and best/ "
        "too: copy them elsewhere first if you want their models)"
    )


def best_is_lost(accelerator, output_dir):
    """Whether `output_dir/best` is missing or damaged (the main process checks and warns; every
    process gets its answer). The caller then forgets the best metric, so that the next
    evaluation writes best/ again."""
    lost = None
    if accelerator.is_main_process:
        best = existing_dir(Path(output_dir) / "best")
        problem = f"{Path(output_dir) / 'best'} is missing" if best is None else saved_model_problem(best)
        if problem is not None:
            warn(
                f"{problem}: the best model so far is lost; best/ will hold the best model evaluated from the "
                "resumed step on"
            )
        lost = problem is not None
    return broadcast_object_list([lost])[0]
