"""The settings of a run: what `args.json` records at the first start, and how a resume's
settings compare with them (`options.MAY_CHANGE_ON_RESUME` lists what may differ without
`--allow_changed_args`); each resume's changes go into `resumes.jsonl` (`resume_record`)."""

import json
import os
import socket
import time
from pathlib import Path

from .atomic_files import write_json
from .messages import fail, warn
from .options import MAY_CHANGE_ON_RESUME, START_FLAGS

# Options whose values are paths: the same folder spelled another way is the same setting.
PATH_OPTIONS = frozenset({"output_dir", "data_dir", "tokenizer", "train_file", "validation_file", "test_file"})


def run_settings(args, num_processes):
    """What `args.json` records and a resume must match: the command-line settings `args` and the
    number of training processes, which sets the global batch (processes x accumulation x
    micro-batch) and the share of an epoch each process trains."""
    return {**vars(args), "num_processes": num_processes}


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
