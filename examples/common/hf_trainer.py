"""What the `Trainer` scripts share: the model flags, reading data and the tokenizer with clear
errors, the train-then-save sequence, and the Trainer classes whose `push_to_hub` uploads talk_hf's model card
for our model types (`TalkHfCard`)."""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData
from transformers import Seq2SeqTrainer, Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from talk_hf.model_card import CARD_NAME, checkpoint_model_card

from .checkpoints import quiet_saves
from .data import DataError, load_columns
from .models import is_ours
from .tokenizer import load_tokenizer

# The parts of transformers' Trainer card (modelcard.TrainingSummary.to_model_card, the same in 5.17 and 5.24)
# that talk_hf's card keeps: the last evaluation's results (its list) and the training procedure to the end.
TRAINER_RESULTS = re.compile(r"^It achieves the following results on the evaluation set:\n((?:- .*\n)+)", re.MULTILINE)
TRAINER_PROCEDURE = "\n## Training procedure\n"
# Written into each checkpoint-* the scripts save: the --model_name_or_path its run started from, which nothing
# of the Trainer's records (config.json, trainer_state.json and training_args.bin do not), for `resume_point`.
START_RECORD = "talk_hf_start.json"


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


def require_work(training_args, flags):
    """Stop the script when it would do nothing: none of `flags` (``do_train``, ...) nor ``--push_to_hub``."""
    if not (training_args.push_to_hub or any(getattr(training_args, flag) for flag in flags)):
        options = ", ".join(f"--{flag}" for flag in flags)
        raise SystemExit(f"error: nothing to do: give at least one of {options} (or --push_to_hub)")


def model_source(name_or_path: str) -> str:
    """`--model_name_or_path` as `START_RECORD` holds it: a local folder's absolute path, else the Hub name."""
    path = Path(name_or_path)
    return str(path.resolve()) if path.exists() else name_or_path


def resume_point(model_args, training_args) -> str | None:
    """The checkpoint that ``--do_train`` continues: ``--resume_from_checkpoint``, else the last ``checkpoint-*``
    in ``--output_dir`` (as transformers' scripts do); None for a fresh start. A resume is announced with the
    checkpoint's step and how to start afresh; a checkpoint without ``trainer_state.json``, and one whose run started
    from another ``--model_name_or_path`` (its `START_RECORD`; resuming would train that run's weights, optimizer
    and schedule, not this model), stop the script naming both and the remedies."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None:
        output_dir = training_args.output_dir
        checkpoint = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
        if checkpoint is None:
            return None
        found = f"{checkpoint} (the last checkpoint in --output_dir)"
        fresh = f"to start afresh instead, give another --output_dir or delete the checkpoint-* folders in {output_dir}"
    else:
        found = f"--resume_from_checkpoint {checkpoint}"
        fresh = "to start afresh instead, leave out --resume_from_checkpoint"
    state = Path(checkpoint, "trainer_state.json")
    if not state.is_file():
        raise SystemExit(f"error: {found} is not a Trainer checkpoint: it has no trainer_state.json; {fresh}")
    record = Path(checkpoint, START_RECORD)
    started = json.loads(record.read_text(encoding="utf-8"))["model_name_or_path"] if record.is_file() else None
    this = model_source(model_args.model_name_or_path)
    if started not in (None, this):
        raise SystemExit(
            f"error: {found} continues a run that started from --model_name_or_path {started}, not from this "
            f"run's {this}: resuming would train that run's weights, optimizer and schedule. To continue that run, "
            f"give --model_name_or_path {started}; {fresh}"
        )
    if training_args.process_index == 0:
        step = json.loads(state.read_text(encoding="utf-8"))["global_step"]
        origin = f"started from {started}" if started else "which does not record the model its run started from"
        print(f"Checkpoint detected: resuming training at {checkpoint} (step {step}, {origin}); {fresh}", flush=True)
    return checkpoint


class RecordStart(TrainerCallback):
    """Writes `START_RECORD` (the run's `model_source`) into every checkpoint the Trainer saves."""

    def __init__(self, model_name_or_path: str):
        self.record = json.dumps({"model_name_or_path": model_source(model_name_or_path)}) + "\n"

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            (folder / START_RECORD).write_text(self.record, encoding="utf-8")


def train_and_save(trainer, model_args, checkpoint):
    """Train (continuing `checkpoint`, `resume_point`'s, when not None), recording `--model_name_or_path` in
    every checkpoint (`RecordStart`), then save the model, tokenizer, metrics and trainer state into
    `output_dir`.  The Trainer's own progress bar shows; the bar of each checkpoint's save does not
    (`quiet_saves`)."""
    trainer.add_callback(RecordStart(model_args.model_name_or_path))
    with quiet_saves():
        result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()


def finish(trainer):
    """Upload `output_dir` with ``--push_to_hub``; else, after ``--do_train`` (which saved the model there), write
    its model card there (``create_model_card``: talk_hf's for our model types), as transformers' scripts do."""
    if trainer.args.push_to_hub:
        trainer.push_to_hub()
    elif trainer.args.do_train:
        trainer.create_model_card()


def log_and_save(trainer, split, metrics):
    trainer.log_metrics(split, metrics)
    trainer.save_metrics(split, metrics)


def trainer_facts(generic_text: str) -> str:
    """The markdown that talk_hf's card takes from the text of transformers' Trainer card (`generic_text`): its
    evaluation results as an ``## Evaluation results`` section, then its ``## Training procedure`` (hyperparameters,
    the table of evaluations during training, framework versions). What else that text says is dropped: the
    sentence naming the start and data ("trained from scratch on the None dataset" for a local folder and local
    files) and the sections that say only "More information needed"; empty where it holds neither part."""
    results = TRAINER_RESULTS.search(generic_text)
    start = generic_text.find(TRAINER_PROCEDURE)
    facts = f"\n## Evaluation results\n\nThe Trainer's last evaluation:\n{results.group(1)}" if results else ""
    return facts + (generic_text[start:] if start >= 0 else "")


class TalkHfCard:
    """For transformers' `Trainer` classes (put first among the bases): `create_model_card`, which
    ``push_to_hub`` calls before it uploads `output_dir`, writes talk_hf's card for our model types
    (`talk_hf.model_card.checkpoint_model_card`) in place of transformers' generic one (``library_name:
    transformers``, no pipeline tag, no way to load the checkpoint without ``import talk_hf``). The card keeps
    what the Trainer's knew: its tags (``generated_from_trainer``, the model's ``model_tags``, ``push_to_hub``'s
    ``tags``) after ``talk_hf`` and the model type, its other metadata (``model-index``, ``base_model``, ``license``,
    ``datasets``, where it has them) and its facts of the run (`trainer_facts`).  transformers' own model types
    (the baselines) keep transformers' card.

    The modeling code is not copied into `output_dir`, so the card's only loading lines are those after
    ``import talk_hf``: ``push_to_hub`` uploads the folder without the files matching ``_*`` (and
    ``checkpoint-*``), which would leave out the private modules that `talk_hf.export_for_remote_code` writes
    (``_backend.py``, ...), and `output_dir` is the training folder, which later runs load and resume from. The
    custom scripts' ``--push_to_hub`` (`common.hub`) uploads a copy with the code."""

    def create_model_card(self, *args, **kwargs) -> None:
        """transformers' card (``Trainer.create_model_card(*args, **kwargs)``, its arguments), then for our
        model types talk_hf's in its place, as `output_dir`/README.md, on the main process."""
        super().create_model_card(*args, **kwargs)
        if not (self.is_world_process_zero() and is_ours(self.model.config)):
            return
        folder = Path(self.args.output_dir)
        generic = ModelCard((folder / CARD_NAME).read_text(encoding="utf-8"))
        # The repository push_to_hub uploads to (init_hf_repo's), else the one it would create.
        repo_id = self.hub_model_id or self.args.hub_model_id or folder.absolute().name
        card = checkpoint_model_card(repo_id, folder, self.model.can_generate(), generic.data.tags or [])
        own = card.data.to_dict()
        card.data = ModelCardData(
            **own, **{key: value for key, value in generic.data.to_dict().items() if key not in own}
        )
        card.text += trainer_facts(generic.text)
        card.save(folder / CARD_NAME)


class TalkHfTrainer(TalkHfCard, Trainer):
    """transformers' `Trainer` whose card is talk_hf's for our model types (`TalkHfCard`)."""


class TalkHfSeq2SeqTrainer(TalkHfCard, Seq2SeqTrainer):
    """transformers' `Seq2SeqTrainer` whose card is talk_hf's for our model types (`TalkHfCard`)."""
