"""The saved training state of a run (`state/`), written and read so that nothing in it runs code.

    pytorch_model.bin, optimizer.bin, scheduler.bin, random_states_<process>.pkl
        Accelerate's files (`torch.save` archives); Accelerate loads them with torch's
        `weights_only=True` unpickler: tensors, numbers, strings, containers, numpy's RNG arrays.
        Under FSDP's SHARDED_STATE_DICT, `torch.distributed.checkpoint` folders instead, whose
        `.metadata` pickle torch loads with plain `pickle.load`: it is checked first
        (`file_checks.CheckpointMetadataUnpickler`)
    progress.json               `checkpoints.Progress`: where training stands, every field checked
    weight_average.safetensors  the `--average_last` snapshots (`averaging.WeightAverage`): tensors only

Nothing is registered with `accelerator.register_for_checkpointing`: Accelerate unpickles those
objects' `custom_checkpoint_<i>.pkl` with `weights_only=False`, which runs whatever the file holds.
A `state/` that holds such a file (the format of the scripts before progress.json, or a file put
there) is refused without reading it. Errors name the file and what the user can do; a lost
random-number state is a warning, and the run goes on.
"""

import json
import re
from dataclasses import fields
from pathlib import Path

from accelerate.utils import load as accelerate_load
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .atomic_files import existing_dir, flush_to_disk
from .file_checks import archive_problem, checkpoint_metadata_problem, damaged_file
from .folder_saves import save_folder
from .messages import fail, first_line, warn

PROGRESS_FILE = "progress.json"
AVERAGE_FILE = "weight_average.safetensors"
PICKLED_OBJECTS = re.compile(r"^custom_checkpoint_\d+\.pkl$")  # what `register_for_checkpointing` saves


def save_state(accelerator, directory, progress, average=None):
    """The Accelerate state, `progress` (a `Progress`) and the snapshots of `average` (a
    `WeightAverage`, or None) into `directory`, atomically (`folder_saves.save_folder`; call on every
    process). `log.jsonl` is flushed to disk with it, so the records up to this save outlast a power cut."""

    def write(tmp):
        accelerator.save_state(tmp, safe_serialization=False)  # tied weights stay tied, no warning
        if accelerator.is_main_process:
            (tmp / PROGRESS_FILE).write_text(json.dumps(progress.state_dict(), indent=1) + "\n")
            if average is not None:
                save_file(snapshot_tensors(average.state_dict()["snapshots"]), tmp / AVERAGE_FILE)
            log = Path(directory).parent / "log.jsonl"
            if log.exists():
                flush_to_disk(log)

    save_folder(accelerator, directory, write)


def snapshot_tensors(snapshots):
    """{"<snapshot>.<parameter>": tensor} of a list of snapshots (each a list of parameter tensors)."""
    return {f"{s}.{p}": tensor for s, snapshot in enumerate(snapshots) for p, tensor in enumerate(snapshot)}


def load_state(accelerator, output_dir, progress, average=None):
    """Load the run's saved state into the prepared objects, `progress` and `average`; returns the
    folder it loaded. Raises SystemExit naming the file that does not load, with what the user can do."""
    state_dir = check_resumable(output_dir)
    checks = [(path, archive_problem) for path in sorted(state_dir.glob("*.bin"))]  # a changed byte would load
    checks += [(path, checkpoint_metadata_problem) for path in sorted(state_dir.rglob("*.metadata"))]  # pickle.load
    for path, check in checks:
        problem = check(path)
        if problem is not None:
            fail(unusable_state(state_dir, f"{path} does not load ({problem})"))
    saved_progress = read_progress(state_dir, progress)
    snapshots = None if average is None else read_snapshots(state_dir, average)
    warn_if_random_state_lost(accelerator, state_dir)
    try:
        accelerator.load_state(state_dir)
    except Exception as error:  # torch, pickle and accelerate raise many kinds
        fail(state_failure(state_dir, error))
    progress.load_state_dict(saved_progress)
    if average is not None:
        average.load_state_dict({"snapshots": snapshots})
    return state_dir


def check_resumable(folder):
    """The saved state of the run in `folder` (`state/`, or `state.old/` where a kill left only that).

    Refuses `--resume` where there is none to continue from, or one saved in a format that would
    run code (`refuse_pickled_objects`): checked before a resume writes anything.
    """
    state_dir = existing_dir(Path(folder) / "state")
    if state_dir is None:
        fail(
            f"--resume: nothing to resume in {folder}: {Path(folder) / 'state'} does not exist (the run stopped "
            "before its first save, or state/ was deleted). Leave out --resume to start anew, with "
            "--overwrite_output_dir if the folder holds a run's outputs"
        )
    refuse_pickled_objects(state_dir)
    return state_dir


def refuse_pickled_objects(state_dir):
    """Stop at a `custom_checkpoint_<i>.pkl` in `state_dir`, unread: Accelerate would unpickle it
    with `weights_only=False`, which runs any code it holds."""
    pickled = sorted(p for p in Path(state_dir).iterdir() if PICKLED_OBJECTS.match(p.name))
    if not pickled:
        return
    if (Path(state_dir) / PROGRESS_FILE).exists():
        fail(
            f"{pickled[0]} is no part of a save of these scripts ({PROGRESS_FILE} holds the run's progress), and "
            "a pickle that Accelerate would load with weights_only=False, which runs any code it holds: it is not "
            "loaded. Delete it, then resume again"
        )
    fail(
        f"{pickled[0]}: {state_dir} was saved by an earlier version of these scripts, which kept the run's progress "
        f"in pickles that load with weights_only=False (they can run any code); this version reads it from "
        f"{PROGRESS_FILE} and loads no such pickle. Continue the run with the version that started it (its "
        "environment.json names the commit), or start anew"
    )


def read_progress(state_dir, progress):
    """The fields of `progress.json` in `state_dir`, checked against `progress` (a `Progress`).

    Raises SystemExit when the file is missing, does not parse, or lacks a field or holds one of
    another type: resuming "at step 0" with the optimizer of a later step would be silently wrong.
    """
    path = Path(state_dir) / PROGRESS_FILE
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        fail(unusable_state(state_dir, f"{path} is missing"))
    except (OSError, ValueError) as error:
        fail(unusable_state(state_dir, f"{path} does not load ({first_line(error)})"))
    problem = progress_problem(saved, progress)
    if problem is not None:
        fail(unusable_state(state_dir, f"{path} {problem}"))
    return saved


def progress_problem(saved, progress):
    """What is wrong with `saved` (a parsed progress.json) as the fields of `progress`, or None."""
    if not isinstance(saved, dict):
        return "holds no JSON object of the run's progress"
    expected = {field.name: field.type for field in fields(progress)}
    missing, unknown = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    if missing:
        return f"lacks the progress fields {', '.join(missing)}"
    if unknown:
        return f"holds fields that no progress has: {', '.join(unknown)}"
    for name, kind in expected.items():
        value = saved[name]
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is int and value < 0):
            return f"holds {name} {json.dumps(value)}, which is no {'count' if kind is int else kind}"
    return None


def read_snapshots(state_dir, average):
    """The `--average_last` snapshots saved in `state_dir`, checked against the parameters of
    `average` (a `WeightAverage`): a list of snapshots, each a list of tensors."""
    path = Path(state_dir) / AVERAGE_FILE
    if not path.is_file():
        fail(
            f"{path} is missing: the saved run kept no weight snapshots to average. Resume with the run's "
            "--average_last, or start anew"
        )
    try:
        tensors = load_file(path)
    except (OSError, SafetensorError) as error:
        fail(unusable_state(state_dir, f"{path} does not load ({first_line(error)})"))
    shapes = [parameter.shape for parameter in average.parameters]
    count = len(tensors) // max(1, len(shapes))
    snapshots = [[tensors.get(f"{s}.{p}") for p in range(len(shapes))] for s in range(count)]
    whole = len(tensors) == count * len(shapes) and all(
        snapshot[p] is not None and snapshot[p].shape == shape
        for snapshot in snapshots
        for p, shape in enumerate(shapes)
    )
    if not whole:
        fail(
            unusable_state(state_dir, f"{path} does not hold whole snapshots of this model's {len(shapes)} parameters")
        )
    return snapshots


def warn_if_random_state_lost(accelerator, state_dir):
    """Accelerate resumes without a word when a process's random state does not load: say so."""
    path = Path(state_dir) / f"random_states_{accelerator.process_index}.pkl"
    try:
        accelerate_load(path, weights_only=True)
    except FileNotFoundError:
        problem = "is missing"
    except Exception as error:  # what loading a damaged pickle raises varies
        problem = f"does not load ({first_line(error)})"
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
            f"the state saved in {state_dir} does not load into this run ({first_line(error)}), although its "
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
