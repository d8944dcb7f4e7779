"""What the `Trainer` scripts share: the model flags and the train-then-save sequence."""

from dataclasses import dataclass, field
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

from .checkpoints import quiet_saves


@dataclass
class ModelArguments:
    model_name_or_path: str = field(metadata={"help": "checkpoint folder or Hub name (ours after `import talk_hf`)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "default: the model's own"})


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
