"""Fine-tune a translation model with `Seq2SeqTrainer`: the flags of transformers' own example.

    python examples/translation/run_translation.py --model_name_or_path runs/talk-multi30k/best \\
        --data_dir ../shared/data/multi30k --source_lang de --target_lang en \\
        --do_train --do_eval --predict_with_generate --output_dir runs/talk-multi30k-ft

`--model_name_or_path` is any seq2seq checkpoint: one written by `train.py` (ours, loaded through
the Auto classes after `import talk_hf`) or a Hub model. Data comes from `--data_dir` (local text,
gzip, JSON lines or `datasets` folder) or `--dataset_name` (Hub). BLEU is sacrebleu's; every
`TrainingArguments` flag works (`--per_device_train_batch_size`, `--learning_rate`,
`--label_smoothing_factor`, `--eval_strategy`, `--resume_from_checkpoint`, `--push_to_hub`, ...).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import talk_hf  # noqa: F401  (first: registers our models with the Auto classes; imports transformers quietly)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `common`

import datasets  # noqa: E402
import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
from common import hub  # noqa: E402
from common.hf_trainer import (  # noqa: E402
    ModelArguments,
    TalkHfSeq2SeqTrainer,
    finish,
    log_and_save,
    read_split,
    require_work,
    resume_point,
    train_and_save,
    trainer_tokenizer,
)
from transformers import (  # noqa: E402
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainingArguments,
    set_seed,
)


@dataclass
class DataTrainingArguments:
    source_lang: str = field(default="de")
    target_lang: str = field(default="en")
    data_dir: str | None = field(default=None, metadata={"help": "local data folder (see common/data.py)"})
    dataset_name: str | None = field(default="bentrevett/multi30k", metadata={"help": "Hub dataset without --data_dir"})
    dataset_config_name: str | None = field(default=None)
    train_split: str = field(default="train")
    validation_split: str = field(default="validation")
    test_split: str = field(default="test")
    max_source_length: int = field(default=128, metadata={"help": "longer sources are truncated"})
    max_target_length: int = field(default=128, metadata={"help": "longer targets are truncated"})
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(default=None)
    num_beams: int = field(default=4, metadata={"help": "beam size of every evaluation (during training too)"})


# What `compute_metrics` measures on generated text, so only with --predict_with_generate.
GENERATED_METRICS = ("bleu", "gen_len")


def load_split(data_args, option, limit):
    """A `datasets.Dataset` with `source` and `target` text columns of the split `--{option}` names."""
    columns = read_split(data_args, option, [data_args.source_lang, data_args.target_lang], limit)
    return datasets.Dataset.from_dict(
        {"source": columns[data_args.source_lang], "target": columns[data_args.target_lang]}
    )


def decode(tokenizer, ids):
    """Texts of a batch of generated or label ids (-100 marks padding)."""
    return tokenizer.batch_decode(np.where(ids != -100, ids, tokenizer.pad_token_id), skip_special_tokens=True)


def decode_like_data_args(data_args, training_args):
    """Every evaluation and prediction, those during training included (which ``--metric_for_best_model bleu``
    chooses from), decodes with ``--num_beams`` and ``--max_target_length``: they set ``generation_num_beams`` and
    ``generation_max_length``, as in transformers' script; either of those given otherwise stops the script."""
    for ours, trainers in (("num_beams", "generation_num_beams"), ("max_target_length", "generation_max_length")):
        given, value = getattr(training_args, trainers), getattr(data_args, ours)
        if given not in (None, value):
            raise SystemExit(f"error: --{trainers} {given} differs from --{ours} {value}: give --{ours} alone")
        setattr(training_args, trainers, value)


def check_flags(data_args, training_args):
    """Stop at the start on what would do nothing, or fail only at the first evaluation (`decode_like_data_args`)."""
    require_work(training_args, ("do_train", "do_eval", "do_predict"))
    metric = training_args.metric_for_best_model
    if metric and metric.removeprefix("eval_") in GENERATED_METRICS and not training_args.predict_with_generate:
        raise SystemExit(
            f"error: --metric_for_best_model {metric} needs --predict_with_generate: without it evaluations "
            "generate no text, so they measure the loss alone"
        )
    decode_like_data_args(data_args, training_args)


def main():
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, Seq2SeqTrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    check_flags(data_args, training_args)
    checkpoint = resume_point(model_args, training_args) if training_args.do_train else None
    set_seed(training_args.seed)
    tokenizer = trainer_tokenizer(model_args)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
    generation = {"max_length": data_args.max_target_length, "num_beams": data_args.num_beams}
    # Every checkpoint it saves names the pair it is tuned for, which the card of a later upload of it reads.
    hub.record_task(model.config, hub.translation_task(data_args.source_lang, data_args.target_lang), generation)

    def tokenize(batch):
        inputs = tokenizer(batch["source"], max_length=data_args.max_source_length, truncation=True)
        inputs["labels"] = tokenizer(
            text_target=batch["target"], max_length=data_args.max_target_length, truncation=True
        )["input_ids"]
        return inputs

    def prepare(option, limit):
        return load_split(data_args, option, limit).map(tokenize, batched=True, remove_columns=["source", "target"])

    def compute_metrics(prediction):
        hypotheses = decode(tokenizer, prediction.predictions)
        lengths = np.count_nonzero(
            (prediction.predictions != -100) & (prediction.predictions != tokenizer.pad_token_id), 1
        )
        return {
            "bleu": sacrebleu.corpus_bleu(hypotheses, [decode(tokenizer, prediction.label_ids)]).score,
            "gen_len": float(np.mean(lengths)),
        }

    # Every split is read before training, so that a test split that cannot be read stops the script at once.
    test = prepare("test_split", data_args.max_eval_samples) if training_args.do_predict else None
    trainer = TalkHfSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=prepare("train_split", data_args.max_train_samples) if training_args.do_train else None,
        eval_dataset=prepare("validation_split", data_args.max_eval_samples) if training_args.do_eval else None,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        compute_metrics=compute_metrics if training_args.predict_with_generate else None,
    )
    if training_args.do_train:
        train_and_save(trainer, model_args, checkpoint)
    if training_args.do_eval:
        metrics = trainer.evaluate(metric_key_prefix="eval")
        log_and_save(trainer, "eval", metrics)
    if training_args.do_predict:
        result = trainer.predict(test, metric_key_prefix="predict")
        log_and_save(trainer, "predict", result.metrics)
        if trainer.is_world_process_zero() and training_args.predict_with_generate:
            lines = decode(tokenizer, result.predictions)
            Path(training_args.output_dir, "generated_predictions.txt").write_text("\n".join(lines) + "\n")
    finish(trainer)


if __name__ == "__main__":
    main()
