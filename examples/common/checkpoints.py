"""Checkpoints: where training stands (`Progress`), saving the model and the training state
atomically, resuming from them, and reloading the best model for the test.

A run saves `last/` (model + tokenizer) and `state/` (the Accelerate state: model, optimizer,
scheduler, random states and the objects registered for checkpointing, `Progress` first) every
`--save_every` steps and at the end, and `best/` at each better evaluation. `run_folder` checks
the saved files when a run resumes.
"""

import json
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from accelerate.utils import DistributedType
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from . import run_folder
from .run_folder import existing_dir, replace_dir


@dataclass
class Progress:
    """Where training stands; saved with the Accelerate state so a run resumes mid-epoch."""

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


def resume(accelerator, output_dir, progress, *, custom_objects):
    """Load the run's saved state into the prepared objects and `progress` (and any other object
    registered for checkpointing: `custom_objects` of them in all).

    Forgets the best metric when `best/` is lost, so that the next evaluation writes it again.
    Raises SystemExit naming the file that does not load (`run_folder.load_state`).
    """
    state_dir = run_folder.load_state(accelerator, output_dir, custom_objects=custom_objects)
    accelerator.print(f"resumed from {state_dir} at step {progress.step} (epoch {progress.epoch})")
    saved_processes = progress.processes
    repeated = progress.carry_over(accelerator.num_processes, accelerator.gradient_accumulation_steps)
    if saved_processes != accelerator.num_processes or repeated:
        accelerator.print(
            f"resuming with {accelerator.num_processes} process(es) where the saved run had {saved_processes}: "
            f"epoch {progress.epoch} goes on from its batch {progress.batches_in_epoch * accelerator.num_processes}"
            + (f" ({repeated} batch(es) trained again to start on a whole step)" if repeated else "")
        )
    if progress.best is not None and run_folder.best_is_lost(accelerator, output_dir):
        progress.best = None


class Saver:
    """Saves the model being trained, with its tokenizer, into `output_dir` (call on every process)."""

    def __init__(self, accelerator, model, tokenizer, output_dir):
        self.accelerator, self.model, self.tokenizer = accelerator, model, tokenizer
        self.output_dir = Path(output_dir)

    def save_latest(self, progress):
        """`last/` and `state/`: what a resume continues from."""
        save_model(self.accelerator, self.model, self.tokenizer, self.output_dir / "last", asdict(progress))
        save_state(self.accelerator, self.output_dir / "state")

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

    `metadata` goes into the folder's `training_state.json`.
    """
    # Under FSDP the full weights must be gathered from the shards (every process takes part).
    state_dict = accelerator.get_state_dict(model) if accelerator.distributed_type == DistributedType.FSDP else None
    if accelerator.is_main_process:
        tmp = Path(str(directory) + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with quiet_saves():
            accelerator.unwrap_model(model).save_pretrained(tmp, state_dict=state_dict)
            tokenizer.save_pretrained(tmp)
        (tmp / "training_state.json").write_text(json.dumps(metadata, indent=1))
        replace_dir(tmp, directory)
    accelerator.wait_for_everyone()


def save_state(accelerator, directory):
    """`accelerator.save_state` into `directory`, atomically (call on every process)."""
    tmp = Path(str(directory) + ".tmp")
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    with quiet_saves():
        accelerator.save_state(tmp, safe_serialization=False)  # tied weights stay tied, no warning
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        log = Path(directory).parent / "log.jsonl"  # the records up to this save outlast a power cut too
        if log.exists():
            run_folder.flush_to_disk(log)
        replace_dir(tmp, directory)
    accelerator.wait_for_everyone()


def load_best(accelerator, output_dir, auto_class):
    """(folder, tokenizer, model) of `output_dir/best`, reloaded through `auto_class` for evaluation."""
    best = existing_dir(Path(output_dir) / "best")
    return best, AutoTokenizer.from_pretrained(best), auto_class.from_pretrained(best).to(accelerator.device).eval()
