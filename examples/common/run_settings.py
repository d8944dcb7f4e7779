"""The settings of a run: what `args.json` records at the first start, and how a resume's
settings compare with them (`options.MAY_CHANGE_ON_RESUME` lists what may differ without
`--allow_changed_args`); each resume's changes go into `resumes.jsonl` (`resume_record`).

Besides the command line, the settings record what the run trains with that no option shows: the
process count, the mixed precision Accelerate runs (`mixed_precision_used`) and a fingerprint of the
training text (`train_data`)."""

import hashlib
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
# The options that choose the training text: where they differ, so does `train_data`, which then says nothing more.
DATA_OPTIONS = frozenset(
    {"data_dir", "dataset_name", "dataset_config", "train_split", "train_file", "max_train_samples"}
    | {"source_lang", "target_lang", "document_column", "summary_column", "skip_blank_pairs"}
)
# The recorded settings that are no option, as an error names them.
RECORDED = {
    "mixed_precision_used": "the mixed precision that ran (--mixed_precision, else the ACCELERATE_MIXED_PRECISION "
    "that `accelerate launch` sets from `accelerate config`)",
    "train_data": "the training split's text (its records and their SHA-256)",
}
# The schedules whose learning rate at a step depends on the run's length (`optimizer_steps.make_optimizer`).
LENGTH_SCHEDULES = frozenset({"cosine"})


def run_settings(args, num_processes, *, mixed_precision, train_data=None):
    """What `args.json` records and a resume must match: the command-line settings `args`, the
    number of training processes, which sets the global batch (processes x accumulation x
    micro-batch) and the share of an epoch each process trains, and the mixed precision that runs
    (`Accelerator.mixed_precision`: --mixed_precision, else what `accelerate launch` passed on).
    `train_data`: the training split's columns ({column: [str, ...]}), recorded as `data_fingerprint`
    (None: not recorded)."""
    settings = {**vars(args), "num_processes": num_processes, "mixed_precision_used": mixed_precision}
    if train_data is not None:
        settings["train_data"] = data_fingerprint(train_data)
    return settings


def data_fingerprint(columns):
    """{"records": N, "sha256": hex} of training text {column: [str, ...]} (columns aligned by index).

    The hash runs over each column's name and strings in turn, each prefixed by its length in bytes (so that
    no two texts share one), without a copy of the whole text (CNN-DailyMail's training split is 1.2 GB)."""
    digest = hashlib.sha256()
    for name in sorted(columns):
        for text in (name, *columns[name]):
            data = text.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little") + data)
    count = len(next(iter(columns.values()), []))
    return {"records": count, "sha256": digest.hexdigest()}


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
    length = schedule_length_change(saved, settings, changed)
    if (fixed or length) and not allow_changed:
        why = []
        if fixed:
            why.append(
                f"{listed(fixed)}. They shape the model, the data, the tokenizer or the optimization, so the resumed "
                "run would not continue the saved one"
            )
        if length:
            why.append(f"{listed(length)}. {jump(settings)}")
        fail(
            f"--resume with settings that differ from the ones {Path(folder) / 'args.json'} recorded at the run's "
            f"start: {'; and '.join(why)}. Give the recorded values, or add --allow_changed_args to resume with the "
            "new ones on purpose"
        )
    if length:
        warn(f"--allow_changed_args: {listed(length)}. {jump(settings)}")
    return changed


def listed(changed):
    """`--name old then, new now; ...` of {name: (old, new)}, the recorded settings described."""
    return "; ".join(
        f"{RECORDED.get(name, '--' + name)} {json.dumps(old)} then, {json.dumps(new)} now"
        for name, (old, new) in changed.items()
    )


def schedule_length_change(saved, given, changed):
    """The entries of `changed` ({name: (old, new)}) that change the number of steps that `given`'s
    schedule decays over, where that schedule depends on it (`LENGTH_SCHEDULES`): --max_steps, or
    --epochs where no --max_steps is given. {} otherwise."""
    if given["schedule"] not in LENGTH_SCHEDULES or _length(saved) == _length(given):
        return {}
    return {name: changed[name] for name in ("max_steps", "epochs") if name in changed}


def _length(settings):
    """What sets a run's number of steps: ("max_steps", N), else ("epochs", E)."""
    if settings.get("max_steps") is not None:
        return "max_steps", settings["max_steps"]
    return "epochs", settings.get("epochs")


def jump(settings):
    """Why a schedule of `LENGTH_SCHEDULES` may not change its length on resume."""
    return (
        f"--schedule {settings['schedule']} sets the learning rate of a step from the run's number of steps, and the "
        "saved schedule stands at the saved step: with a new number the learning rate jumps at the resumed step"
    )


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
    as the folders they name); the start flags (`options.START_FLAGS`) are not settings. `train_data`
    is named only where the options that choose the text (`DATA_OPTIONS`) are the same: then the
    text itself changed (a run folder from before it was recorded records none, and compares none)."""
    given = json.loads(json.dumps(given))  # the values as args.json holds them
    names = sorted((saved.keys() & given.keys()) - START_FLAGS)
    changed = {name: (saved[name], given[name]) for name in names if not _same_setting(name, saved[name], given[name])}
    if changed.keys() & DATA_OPTIONS:  # other text was asked for: its fingerprint differs too
        changed.pop("train_data", None)
    return changed


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
