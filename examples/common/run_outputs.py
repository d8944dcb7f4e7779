"""Which entries of an output folder a run of these scripts wrote: its manifest, `outputs.json`.

Each start (fresh or `--resume`) records in `outputs.json`, before it writes anything, the names it
will write (`planned_outputs`); an entry is the run's when the manifest lists its name (or the name
its atomic writes give it for a while: `X.tmp`, `X.old`). A fresh start refuses a folder where the
run would write over an entry that no run recorded (a user's own `train/` or `state/`), with or
without `--overwrite_output_dir`; that flag deletes only the recorded entries, and names what else
it leaves in place. A folder from before manifests holds no recorded entry: its outputs are named,
and left to the user to delete.
"""

import importlib.util
import json
import shutil
from pathlib import Path

from .atomic_files import write_json

MANIFEST = "outputs.json"
# What every run writes into its folder (resumes.jsonl when it resumes), besides the manifest and the
# lock (`run_folder.take_lock`); the three after it only in the cases named.
USUAL_OUTPUTS = ("args.json", "environment.json", "log.jsonl", "tokenizer", "state", "last", "best", "resumes.jsonl")
TENSORBOARD_LOGS = "train"  # the Accelerate tracker's folder, when TensorBoard is installed
TEST_RESULTS = "test_results.json"  # with a test split
HUB_COPY = "hub"  # with --push_to_hub


def tensorboard_installed():
    """Whether TensorBoard is installed: the run then logs to it (under `train/`)."""
    return importlib.util.find_spec("tensorboard") is not None


def planned_outputs(args):
    """The names a start with the settings `args` writes into its folder."""
    optional = {TENSORBOARD_LOGS: tensorboard_installed(), TEST_RESULTS: bool(args.test_split)}
    optional[HUB_COPY] = args.push_to_hub
    return {*USUAL_OUTPUTS, MANIFEST, *(name for name, written in optional.items() if written)}


def output_name(path):
    """The output an entry stands for: its name without the `.tmp` or `.old` of atomic writes."""
    return Path(path).name.removesuffix(".tmp").removesuffix(".old")


def recorded_outputs(folder):
    """(the names `folder/outputs.json` records, or an empty set; what is wrong with that file, or None)."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        return set(), None
    try:
        names = json.loads(path.read_text())["outputs"]
        if isinstance(names, list) and all(isinstance(name, str) for name in names):
            return set(names), None
        problem = "lists no names"
    except (OSError, ValueError, KeyError, TypeError) as error:
        problem = f"does not read as a list of outputs ({error})"
    return set(), f"{path} {problem}"


def entries(folder, names):
    """The entries of `folder` that stand for one of `names` (`output_name`), sorted."""
    return sorted(p for p in Path(folder).iterdir() if output_name(p) in names) if Path(folder).is_dir() else []


def listed(paths):
    """`a, b/, c` for the entries `paths`, folders with a slash."""
    return ", ".join(p.name + ("/" if p.is_dir() and not p.is_symlink() else "") for p in paths)


def record(folder, names):
    """Add `names` to the manifest of `folder` (written atomically)."""
    recorded, _ = recorded_outputs(folder)
    write_json(Path(folder) / MANIFEST, {"outputs": sorted(recorded | set(names))})


def unrecorded(folder, names):
    """The entries of `folder` that stand for one of `names` but that its manifest does not record."""
    recorded, _ = recorded_outputs(folder)
    return entries(folder, set(names) - recorded - {MANIFEST})


def delete_recorded(folder):
    """Delete the entries of `folder` that its manifest records (and the manifest); returns the
    entries left in place, which no run recorded (the lock's files aside)."""
    recorded, _ = recorded_outputs(folder)
    for path in entries(folder, recorded | {MANIFEST}):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return sorted(p for p in Path(folder).iterdir() if not p.name.startswith(".lock"))
