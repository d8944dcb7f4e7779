"""Checkpoints: where training stands (`Progress`), saving the model and the training state
atomically, resuming from them, and reloading the best model for the test.

A run saves `last/` (model + tokenizer) and `state/` (`training_state`: the Accelerate state,
`Progress` and the `--average_last` snapshots) every `--save_every` steps and at the end, and
`best/` at each better evaluation. `last/` and `best/` record the SHA-256 of each of their files in
`training_state.json`: a resume and the test report check `best/` against them.
"""

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from accelerate.utils import DistributedType, broadcast_object_list
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from .atomic_files import existing_dir
from .file_checks import HASHES_FILE, HASHES_KEY, file_hashes, saved_model_problem
from .folder_saves import save_folder
from .messages import fail, warn
from .training_state import load_state, save_state


@dataclass
class Progress:
    """Where training stands; saved beside the Accelerate state (`state/progress.json`) so a run
    resumes mid-epoch."""

    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches this process has consumed in `epoch`
    step: int = 0  # optimizer steps done
    train_seconds: float = 0.0  # wall time spent training (evaluation and saving excluded)
    train_tokens: int = 0  # target tokens trained on, all processes together
    best: float | None = None  # best validation metric so far
    processes: int = 1  # the processes of the run that counted `batches_in_epoch`

    def carry_over(self, processes, accumulation):
        """Move `batches_in_epoch` to a run of `processes` processes that accumulate `accumulation`
        micro-batches per step, when a resume changes them (`--allow_changed_args`).

        The processes take an epoch's batches in turns (Accelerate's sharding), so the first
        `batches_in_epoch * self.processes` batches of the epoch are done; the resumed run skips as
        many as its processes can share in whole steps. Returns how many done batches it trains
        again (fewer than `processes * accumulation`; 0 when nothing changed).
        """
        done = self.batches_in_epoch * self.processes
        per_process = done // processes // accumulation * accumulation
        self.batches_in_epoch, self.processes = per_process, processes
        return done - per_process * processes

    def advance(self, *, batches, tokens, seconds):
        """Count one optimizer step: this process's `batches` micro-batches, `tokens` target tokens of
        all processes and `seconds` of training time."""
        self.step += 1
        self.batches_in_epoch += batches
        self.train_tokens += tokens
        self.train_seconds += seconds

    def next_epoch(self):
        self.epoch += 1
        self.batches_in_epoch = 0

    def state_dict(self):
        return asdict(self)

    def load_state_dict(self, state):
        for key, value in state.items():
            setattr(self, key, value)


def resume(accelerator, output_dir, progress, average=None):
    """Load the run's saved state into the prepared objects, `progress` and `average` (the
    `WeightAverage` of `--average_last`, or None).

    Forgets the best metric when `best/` is lost, so that the next evaluation writes it again.
    Raises SystemExit naming the file that does not load (`training_state.load_state`).
    """
    state_dir = load_state(accelerator, output_dir, progress, average)
    accelerator.print(f"resumed from {state_dir} at step {progress.step} (epoch {progress.epoch})")
    saved_processes = progress.processes
    repeated = progress.carry_over(accelerator.num_processes, accelerator.gradient_accumulation_steps)
    if saved_processes != accelerator.num_processes or repeated:
        accelerator.print(
            f"resuming with {accelerator.num_processes} process(es) where the saved run had {saved_processes}: "
            f"epoch {progress.epoch} goes on from its batch {progress.batches_in_epoch * accelerator.num_processes}"
            + (f" ({repeated} batch(es) trained again to start on a whole step)" if repeated else "")
        )
    if progress.best is not None and best_is_lost(accelerator, output_dir):
        progress.best = None


def best_is_lost(accelerator, output_dir):
    """Whether `output_dir/best` is missing or damaged (the main process checks and warns; every
    process gets its answer). The caller then forgets the best metric, so that the next
    evaluation writes best/ again."""
    lost = None
    if accelerator.is_main_process:
        problem = best_problem(output_dir)
        if problem is not None:
            warn(
                f"{problem}: the best model so far is lost; best/ will hold the best model evaluated from the "
                "resumed step on"
            )
        lost = problem is not None
    return broadcast_object_list([lost])[0]


def best_problem(output_dir):
    """What is wrong with `output_dir/best` (`file_checks.saved_model_problem`), or None."""
    best = existing_dir(Path(output_dir) / "best")
    return f"{Path(output_dir) / 'best'} is missing" if best is None else saved_model_problem(best)


class Saver:
    """Saves the model being trained, with its tokenizer, into `output_dir` (call on every process);
    `average` (the `WeightAverage` of `--average_last`, or None) is saved with the training state."""

    def __init__(self, accelerator, model, tokenizer, output_dir, average=None):
        self.accelerator, self.model, self.tokenizer = accelerator, model, tokenizer
        self.output_dir, self.average = Path(output_dir), average

    def save_latest(self, progress):
        """`last/` and `state/`: what a resume continues from."""
        save_model(self.accelerator, self.model, self.tokenizer, self.output_dir / "last", asdict(progress))
        save_state(self.accelerator, self.output_dir / "state", progress, self.average)

    def save_best(self, metadata):
        """`best/`, with `metadata` (where training stood, the evaluation's metrics) beside it."""
        save_model(self.accelerator, self.model, self.tokenizer, self.output_dir / "best", metadata)


@contextmanager
def quiet_saves():
    """No progress bars of transformers and huggingface_hub inside the block (`save_pretrained`'s
    "Writing model shards" bar, one per save, is noise in a training log); as they were after it."""
    if not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


def save_model(accelerator, model, tokenizer, directory, metadata):
    """`save_pretrained` model and tokenizer into `directory`, atomically (call on every process).

    The folder's `training_state.json` holds `metadata` and the SHA-256 of every other file of the
    folder (under "sha256"), which `file_checks.saved_model_problem` checks.
    """
    # Under FSDP the full weights must be gathered from the shards (every process takes part).
    state_dict = accelerator.get_state_dict(model) if accelerator.distributed_type == DistributedType.FSDP else None

    def write(tmp):
        if accelerator.is_main_process:
            with quiet_saves():
                accelerator.unwrap_model(model).save_pretrained(tmp, state_dict=state_dict)
                tokenizer.save_pretrained(tmp)
            record = {**metadata, HASHES_KEY: file_hashes(tmp)}
            (tmp / HASHES_FILE).write_text(json.dumps(record, indent=1))

    save_folder(accelerator, directory, write)


def load_best(accelerator, output_dir, auto_class):
    """(folder, tokenizer, model) of `output_dir/best`, reloaded through `auto_class` for evaluation.

    Raises SystemExit when best/ is missing or damaged (`best_problem`): its test would be another model's.
    """
    problem = best_problem(output_dir)
    if problem is not None:
        fail(
            f"{problem}: best/ holds the model the test reports on. last/ in {output_dir} holds the latest model; "
            "to have a best/ again, resume the run with a larger --max_steps: its next evaluation writes best/"
        )
    best = existing_dir(Path(output_dir) / "best")
    return best, AutoTokenizer.from_pretrained(best), auto_class.from_pretrained(best).to(accelerator.device).eval()
