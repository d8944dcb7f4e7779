"""A few optimisation steps with Trainer and Seq2SeqTrainer(predict_with_generate=True)."""

import pytest
import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, Trainer, TrainingArguments

from .helpers import CASES, PAD, random_tokens


class _Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _lm_rows(count=8):
    tokens = random_tokens(count, 6, seed=11)
    return _Rows([{"input_ids": row, "labels": row} for row in tokens])


def _seq2seq_rows(count=8):
    sources, targets = random_tokens(count, 7, seed=12), random_tokens(count, 5, seed=13)
    return _Rows(
        [
            {"input_ids": s, "attention_mask": torch.ones_like(s), "labels": t}
            for s, t in zip(sources, targets, strict=True)
        ]
    )


def _arguments(cls, tmp_path, **extra):
    return cls(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=3,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        gradient_accumulation_steps=2,
        **extra,
    )


LM_CASES = [case for case in CASES if case.name in ("talk-lm", "dynamic-lm", "toy-lm")]


@pytest.mark.parametrize("case", LM_CASES, ids=[case.name for case in LM_CASES])
def test_trainer_lowers_the_lm_loss(case, tmp_path):
    model = case.model().train()
    trainer = Trainer(model=model, args=_arguments(TrainingArguments, tmp_path), train_dataset=_lm_rows())
    before = trainer.evaluate(_lm_rows())["eval_loss"]
    trainer.train()
    assert trainer.evaluate(_lm_rows())["eval_loss"] < before


@pytest.mark.parametrize("case", [c for c in CASES if c.is_seq2seq], ids=[c.name for c in CASES if c.is_seq2seq])
def test_seq2seq_trainer_trains_and_predicts_with_generate(case, tmp_path):
    model = case.model().train()
    args = _arguments(Seq2SeqTrainingArguments, tmp_path, predict_with_generate=True, generation_max_length=6)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=_seq2seq_rows(), eval_dataset=_seq2seq_rows(4))
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] < before
    predictions = trainer.predict(_seq2seq_rows(4), max_length=6).predictions
    # generated up to max_length=6, then padded by the trainer to the generation config's max_length
    assert predictions.shape[0] == 4 and (predictions[:, 6:] == PAD).all() and (predictions[:, 1:6] != PAD).any()
    assert (predictions[:, 0] == model.config.decoder_start_token_id).all()
