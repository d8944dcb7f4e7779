"""What a run folder's files can make a resume do, injected one at a time: pickles that would run
code, a progress file without its fields, a best/ whose bytes changed or that is gone, a disk that
fills up during a save. No file may run code, and each fault ends in an error or a warning that names
the file, or in correct behaviour.
"""

import errno
import json
import pickle
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from common import atomic_files, checkpoints, file_checks, folder_saves, run_folder, training_state
from common.averaging import WeightAverage
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from .conftest import requires_data
from .test_run_faults import change_bytes, finished_run, run_copy, snapshot, steps, train  # noqa: F401 (fixtures)

MARKER = "code-ran"  # the file a malicious pickle creates in the run folder when it is loaded


class CreatesAFile:
    """Unpickled, this creates the file `path`: a stand-in for any code a pickle can run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def plant(path, marker):
    """A `torch.save` archive at `path` whose unpickling would create `marker`."""
    torch.save({"state": CreatesAFile(marker)}, path)


PLANTED = {
    # file put in place: where it sits, and what the resume says (an error or a warning)
    "an extra file in best/": ("best/extra.bin", "warning: {path} does not load \\(it holds objects other than"),
    "best/'s weights as a pickle": ("best/pytorch_model.bin", "warning: {path} does not load \\(it holds objects"),
    "the model state": ("state/pytorch_model.bin", "error: {state}/.* does not load \\(it holds objects other"),
    "a custom checkpoint beside progress.json": ("state/custom_checkpoint_0.pkl", "error: {path} is no part of"),
}


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize("case", PLANTED)
def test_no_pickle_in_a_run_folder_runs_when_the_run_resumes(run_copy, capsys, case):  # noqa: F811
    name, message = PLANTED[case]
    path, marker = run_copy / name, run_copy / MARKER
    plant(path, marker)
    message = message.format(path=path, state=run_copy / "state")
    if message.startswith("error"):
        with pytest.raises(SystemExit, match=message):
            train(run_copy, "--resume", "--max_steps", 7)
    else:
        train(run_copy, "--resume", "--max_steps", 7)
        assert capsys.readouterr().err.count("warning:") == 1
    assert not marker.exists()


@requires_data
@pytest.mark.slow
def test_the_error_path_of_a_damaged_state_runs_no_pickle(run_copy):  # noqa: F811
    """A damaged scheduler.bin makes the resume check every state file: a random-number state that
    would run code (and that Accelerate's own loader had refused) is named, not run."""
    plant(run_copy / "state" / "random_states_0.pkl", run_copy / MARKER)
    plant(run_copy / "state" / "scheduler.bin", run_copy / MARKER)
    with pytest.raises(SystemExit, match="random_states_0.pkl does not load \\(it holds objects other than tensors"):
        train(run_copy, "--resume", "--max_steps", 7)
    assert not (run_copy / MARKER).exists()


@requires_data
@pytest.mark.slow
def test_a_state_saved_with_pickled_progress_is_refused_unread(run_copy):  # noqa: F811
    """The format of the scripts before progress.json: Accelerate would unpickle custom_checkpoint_0.pkl."""
    (run_copy / "state" / training_state.PROGRESS_FILE).unlink()
    plant(run_copy / "state" / "custom_checkpoint_0.pkl", run_copy / MARKER)
    before = snapshot(run_copy)
    pattern = "custom_checkpoint_0.pkl: .* was saved by an earlier version of these scripts.* Continue the run with"
    with pytest.raises(SystemExit, match=pattern):
        train(run_copy, "--resume", "--max_steps", 7)
    assert snapshot(run_copy) == before  # refused before the resume wrote anything (resumes.jsonl, outputs.json)


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize(
    "progress, problem",
    [
        ({}, "lacks the progress fields batches_in_epoch, best, epoch, processes, step, train_seconds, train_tokens"),
        ({"step": "6"}, 'holds step "6", which is no count'),
        ({"epoch": -1}, "holds epoch -1, which is no count"),
        ({"surprise": 1}, "holds fields that no progress has: surprise"),
        ([6], "holds no JSON object of the run.s progress"),
    ],
)
def test_a_progress_file_without_the_progress_it_should_hold_is_refused(run_copy, progress, problem):  # noqa: F811
    """It would resume "at step 0" (or from nonsense) with the optimizer of step 6."""
    path = run_copy / "state" / training_state.PROGRESS_FILE
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, **progress} if isinstance(progress, dict) and progress else progress))
    with pytest.raises(SystemExit, match=f"error: {path} {problem}, so the save in .* cannot be resumed"):
        train(run_copy, "--resume", "--max_steps", 7)


@requires_data
@pytest.mark.slow
def test_the_report_refuses_a_best_whose_weights_changed(run_copy):  # noqa: F811
    """Changed tensor bytes load, and the model generates nonsense: the recorded hash finds them."""
    change_bytes(run_copy / "best" / "model.safetensors")
    pattern = "model.safetensors does not match the SHA-256 .* best/ holds the model the test reports on"
    with pytest.raises(SystemExit, match=pattern):
        checkpoints.load_best(_Accelerator(), run_copy, AutoModelForCausalLM)


class _Accelerator:
    device = "cpu"


@requires_data
@pytest.mark.slow
def test_a_finished_run_resumed_without_best_evaluates_to_write_it(run_copy, capsys):  # noqa: F811
    shutil.rmtree(run_copy / "best")
    train(run_copy, "--resume")
    assert f"warning: {run_copy / 'best'} is missing: the best model so far is lost" in capsys.readouterr().err
    assert file_checks.saved_model_problem(run_copy / "best") is None
    assert json.loads((run_copy / "best" / "training_state.json").read_text())["step"] == 6


# --- a full disk ----------------------------------------------------------------------------------------

Usage = namedtuple("Usage", "total used free")


@requires_data
@pytest.mark.slow
@pytest.mark.parametrize("form", ["OSError 28", "torch's inline_container error"])
def test_a_save_that_fills_the_disk_says_so_and_leaves_the_last_save(run_copy, monkeypatch, form):  # noqa: F811
    def full_disk(*args, **kwargs):
        if form == "OSError 28":
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 0))  # what torch leaves
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", full_disk)
        pattern = (
            f"no space left on device while saving {run_copy / 'state'} .* the partial save .*state.tmp is deleted.* "
            "needs about [\\d.]+ MB free \\(the size of the previous save.* continue with --resume"
        )
        with pytest.raises(SystemExit, match=pattern):
            train(run_copy, "--resume", "--max_steps", 7)
    assert not (run_copy / "state.tmp").exists()
    train(run_copy, "--resume", "--max_steps", 7)  # from the save of step 6, which the failed save left
    assert steps(run_copy) == list(range(1, 8))


@requires_data
@pytest.mark.slow
def test_a_full_disk_at_the_start_of_a_resume_says_so(run_copy, monkeypatch):  # noqa: F811
    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_folder, "append_json_line", no_space)  # resumes.jsonl
    with pytest.raises(SystemExit, match=f"error: no space left on device in {run_copy} .* free space on the disk"):
        train(run_copy, "--resume", "--max_steps", 7)


def test_a_failed_save_counts_as_a_full_disk_by_its_errno_or_the_space_left(tmp_path, monkeypatch):
    assert folder_saves.disk_is_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    wrapped = RuntimeError("basic_ios::clear")
    wrapped.__context__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert folder_saves.disk_is_full(wrapped, tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 10**8, 10**8))
    assert not folder_saves.disk_is_full(RuntimeError("a bug"), tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 0))
    assert folder_saves.disk_is_full(RuntimeError("[enforce fail at inline_container.cc:672]"), tmp_path)


def test_an_atomic_write_that_finds_the_disk_full_leaves_no_partial_file(tmp_path, monkeypatch):
    def no_space(path, text):
        Path(path).write_bytes(b"{")  # half written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", no_space)
    with pytest.raises(OSError):
        atomic_files.write_json(tmp_path / "args.json", {"lr": 1})
    assert list(tmp_path.iterdir()) == []


# --- FSDP's sharded state ------------------------------------------------------------------------------


def test_sharded_state_metadata_is_read_without_running_code(tmp_path):
    """Under FSDP's SHARDED_STATE_DICT, state/ holds torch.distributed.checkpoint folders, whose
    `.metadata` torch reads with a plain pickle.load: the resume checks it first with an allow-list."""
    import torch.distributed.checkpoint as dcp

    state = tmp_path / "state"
    model = torch.nn.Linear(3, 2)
    with pytest.warns(UserWarning):  # no process group: torch saves as one process, and says so
        dcp.save({"model": model.state_dict(), "dtype": torch.ones(2, dtype=torch.bfloat16)}, checkpoint_id=state / "m")
    assert file_checks.checkpoint_metadata_problem(state / "m" / ".metadata") is None
    (state / "optimizer_0").mkdir()
    (state / "optimizer_0" / ".metadata").write_bytes(pickle.dumps(CreatesAFile(tmp_path / MARKER)))
    pattern = "optimizer_0/.metadata does not load \\(it holds objects other than checkpoint metadata.*Unsupported global: io.open"
    with pytest.raises(SystemExit, match=pattern):
        training_state.load_state(None, tmp_path, checkpoints.Progress())
    assert not (tmp_path / MARKER).exists()


def test_a_save_that_fails_otherwise_leaves_the_previous_folder_and_no_partial_copy(tmp_path):
    final = tmp_path / "last"
    final.mkdir()
    (final / "weights").write_text("step 1")

    def write(tmp):
        tmp.mkdir()
        (tmp / "weights").write_text("step 2, half")
        raise ValueError("a bug in the save")

    with pytest.raises(ValueError, match="a bug in the save"):
        folder_saves.save_folder(Accelerator(cpu=True), final, write)
    assert not (tmp_path / "last.tmp").exists() and (final / "weights").read_text() == "step 1"


@pytest.mark.parametrize(
    "record, problem",
    [
        ([1], "records no sha256 of the folder's files"),
        ({"step": 6}, "records no sha256 of the folder's files"),
        ({"sha256": {"../args.json": "0"}}, "records a hash of ../args.json, which is no file of"),
        ({"sha256": {"config.json": "0" * 64}}, "config.json does not match the SHA-256"),
    ],
)
def test_the_hashes_of_a_saved_model_folder_are_checked_as_written(tmp_path, record, problem):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "training_state.json").write_text(json.dumps(record))
    assert problem in file_checks.hash_problem(tmp_path)


def test_averaging_snapshots_are_saved_as_tensors_and_checked_against_the_model(tmp_path):
    model = torch.nn.Linear(3, 2)
    average = WeightAverage(model, 3)
    average.add()
    average.add()
    save_file(
        training_state.snapshot_tensors(average.state_dict()["snapshots"]), tmp_path / "weight_average.safetensors"
    )
    loaded = training_state.read_snapshots(tmp_path, WeightAverage(model, 3))
    assert len(loaded) == 2 and all(torch.equal(a, b) for a, b in zip(loaded[1], average.snapshots[1], strict=True))
    other = WeightAverage(torch.nn.Linear(4, 2), 3)  # another model: its weight has another shape
    with pytest.raises(SystemExit, match="weight_average.safetensors does not hold whole snapshots of this model's 2"):
        training_state.read_snapshots(tmp_path, other)
    (tmp_path / "weight_average.safetensors").unlink()
    with pytest.raises(SystemExit, match="weight_average.safetensors is missing: the saved run kept no weight snap"):
        training_state.read_snapshots(tmp_path, other)
