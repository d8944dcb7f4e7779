"""What the `Trainer` scripts share: the model flags, reading data and the tokenizer with clear
errors, and the train-then-save sequence."""

from dataclasses import dataclass, field
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

from .checkpoints import quiet_saves
from .data import DataError, load_columns
from .tokenizer import load_tokenizer


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "checkpoint folder or Hub name (ours after `import talk_hf`)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "default: the model's own"})


def read_split(data_args, option, columns, limit):
    """`data.load_columns` of the split that `--{option}` names, in `--data_dir` or the Hub's
    `--dataset_name`/`--dataset_config_name`: {column: [str, ...]}, its first `limit` records. Data
    that cannot be read or holds no text stops the script with an error naming `--{option}` and the file."""
    split = getattr(data_args, option)
    location = data_args.data_dir or data_args.dataset_name
    try:
        return load_columns(location, split, columns, data_args.dataset_config_name, limit)
    except DataError as error:
        raise SystemExit(f"error: --{option} {split}: {error}") from None


def trainer_tokenizer(model_args):
    """The tokenizer of `--tokenizer_name`, else of `--model_name_or_path`; one that does not load stops
    the script with an error naming the folder and the file it lacks (`tokenizer.load_tokenizer`)."""
    try:
        return load_tokenizer(model_args.tokenizer_name or model_args.model_name_or_path)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def train_and_save(trainer, training_args):
    """Train (continuing `--resume_from_checkpoint`, else the last checkpoint in `output_dir`), then
    save the model, tokenizer, metrics and trainer state into `output_dir`.  The Trainer's own
    progress bar shows; the bar of each checkpoint's save does not (`quiet_saves`)."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and Path(training_args.output_dir).is_dir():
        checkpoint = get_last_checkpoint(training_args.output_dir)
    with quiet_saves():
        result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()


def log_and_save(trainer, split, metrics):
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)
