"""Fine-tune a causal language model with `Trainer`: the flags of transformers' own example.

    python examples/language-modeling/run_clm.py --model_name_or_path runs/talk-wt2/best \\
        --data_dir ../shared/data/wikitext-2 --do_train --do_eval --output_dir runs/talk-wt2-ft

`--model_name_or_path` is any causal-LM checkpoint: one written by `train.py` (ours, loaded through
the Auto classes after `import talk_hf`) or a Hub model. Lines get an end-of-sequence token, are
concatenated and cut into `--block_size` blocks whose consecutive blocks share one token, so every
token is predicted exactly once and `eval_loss` gives the usual perplexity. Every
`TrainingArguments` flag works.

`--packing` trains padding-free instead: every line (with its end-of-sequence token; cut into
`--block_size` pieces that share their edge token, only when longer) is a document, and `DataCollatorWithFlattening` packs each
batch of `--per_device_train_batch_size` documents into one row, each document computed as if alone
(docs/models.md, "Packed sequences"). Evaluation keeps the blocks (the same perplexity): flattened,
each block is a document of its own, as it is a row of its own unpacked.
"""

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import talk_hf  # noqa: F401  (first: registers our models with the Auto classes; imports transformers quietly)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `common`

import datasets  # noqa: E402
from common.batching import lm_blocks, lm_documents  # noqa: E402
from common.hf_trainer import (  # noqa: E402
    ModelArguments,
    TalkHfTrainer,
    finish,
    log_and_save,
    read_split,
    require_work,
    resume_point,
    train_and_save,
    trainer_tokenizer,
)
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    DataCollatorWithFlattening,
    HfArgumentParser,
    TrainingArguments,
    default_data_collator,
    set_seed,
)


@dataclass
class DataTrainingArguments:
    data_dir: str | None = field(default=None, metadata={"help": "local data folder (see common/data.py)"})
    dataset_name: str | None = field(default="Salesforce/wikitext", metadata={"help": "Hub dataset without --data_dir"})
    dataset_config_name: str | None = field(default="wikitext-2-v1")
    text_column: str = field(default="text")
    train_split: str = field(default="train")
    validation_split: str = field(default="validation")
    block_size: int = field(default=256, metadata={"help": "tokens per training sequence"})
    packing: bool = field(
        default=False, metadata={"help": "train on packed lines (DataCollatorWithFlattening), not on blocks"}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N lines"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N lines"})


def load_blocks(data_args, tokenizer, option, limit):
    """A `datasets.Dataset` of `block_size`-token blocks (labels = inputs: the model shifts them) of
    the split `--{option}` names; text too short for one block stops the script naming --block_size."""
    lines = read_split(data_args, option, [data_args.text_column], limit)[data_args.text_column]
    try:
        blocks = lm_blocks(tokenizer(lines)["input_ids"], tokenizer.eos_token_id, data_args.block_size - 1).tolist()
    except ValueError as error:
        raise SystemExit(
            f"error: --{option} {getattr(data_args, option)}: its text is too short for --block_size "
            f"{data_args.block_size}: {error}. Lower --block_size, or give more text"
        ) from None
    return datasets.Dataset.from_dict({"input_ids": blocks, "labels": blocks})


def load_documents(data_args, tokenizer, option, limit):
    """A `datasets.Dataset` of the split's lines as documents (`batching.lm_documents`: ids with an
    end-of-sequence token, lines longer than `--block_size` cut into pieces sharing their edge token, empty
    lines left out)."""
    lines = read_split(data_args, option, [data_args.text_column], limit)[data_args.text_column]
    documents = lm_documents(tokenizer(lines)["input_ids"], tokenizer.eos_token_id, data_args.block_size)
    if not documents:
        raise SystemExit(f"error: --{option} {getattr(data_args, option)}: its lines hold no token to train on")
    return datasets.Dataset.from_dict({"input_ids": documents})


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    if training_args.do_predict:
        raise SystemExit(
            "error: --do_predict: run_clm.py has no test split to predict on; --do_eval evaluates "
            "--validation_split (give it the test split's name to evaluate that)"
        )
    require_work(training_args, ("do_train", "do_eval"))
    if data_args.block_size < 2:  # blocks share one token, and a one-token document predicts nothing
        raise SystemExit(
            f"error: --block_size must be >= 2 (a sequence of one token predicts nothing), not {data_args.block_size}"
        )
    checkpoint = resume_point(model_args, training_args) if training_args.do_train else None
    set_seed(training_args.seed)
    tokenizer = trainer_tokenizer(model_args)
    if tokenizer.eos_token_id is None:
        raise SystemExit(f"error: tokenizer {tokenizer.name_or_path} has no end-of-sequence token")
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    trainer = TalkHfTrainer(
        model=model,
        args=training_args,
        train_dataset=(
            (load_documents if data_args.packing else load_blocks)(
                data_args, tokenizer, "train_split", data_args.max_train_samples
            )
            if training_args.do_train
            else None
        ),
        eval_dataset=(
            load_blocks(data_args, tokenizer, "validation_split", data_args.max_eval_samples)
            if training_args.do_eval
            else None
        ),
        processing_class=tokenizer,
        data_collator=DataCollatorWithFlattening() if data_args.packing else default_data_collator,
    )
    if training_args.do_train:
        train_and_save(trainer, model_args, checkpoint)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        metrics["perplexity"] = math.exp(min(metrics["eval_loss"], 50))
        log_and_save(trainer, "eval", metrics)
    finish(trainer)


if __name__ == "__main__":
    main()
