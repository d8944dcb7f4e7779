"""The Trainer / Seq2SeqTrainer scripts fine-tune our models and save checkpoints the Auto classes load."""

import json
import math

import pytest
from common.data import load_columns
from common.models import build_model
from common.tokenizer import train_tokenizer
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import MULTI30K, WIKITEXT, requires_data, run

pytestmark = [requires_data, pytest.mark.slow]  # subprocess runs of the scripts
TINY = {"d_model": 32, "ffn_dim": 64, "heads": 2, "encoder_layers": 1, "decoder_layers": 1}
TRAINER = (
    "--report_to none --max_steps 2 --save_steps 1 --logging_steps 1 --max_eval_samples 8"
    " --per_device_train_batch_size 8 --per_device_eval_batch_size 8"
).split()


def tiny_checkpoint(folder, model_type, texts, encoder_decoder, **tokenizer_args):
    """A freshly initialised tiny model and its tokenizer, saved like train.py saves them."""
    tokenizer = train_tokenizer(texts, **tokenizer_args)
    sizes = TINY if encoder_decoder else {k: v for k, v in TINY.items() if k != "encoder_layers"}
    build_model(model_type, tokenizer, encoder_decoder, **sizes).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_run_translation_fine_tunes_and_predicts(tmp_path):
    pairs = load_columns(MULTI30K, "train", ["de", "en"], limit=200)
    start = tiny_checkpoint(
        tmp_path / "start", "talk", pairs["de"] + pairs["en"], True, kind="bpe", vocab_size=300, add_eos=True
    )
    output = tmp_path / "out"
    flags = "--do_train --do_eval --do_predict --predict_with_generate --max_train_samples 64 --num_beams 2"
    flags += " --max_target_length 24 --label_smoothing_factor 0.1"
    printed = run(
        "translation/run_translation.py",
        "--model_name_or_path",
        start,
        "--data_dir",
        MULTI30K,
        "--output_dir",
        output,
        *flags.split(),
        *TRAINER,
    )
    assert 0 <= json.loads((output / "eval_results.json").read_text())["eval_bleu"] <= 100
    assert "Writing model shards" not in printed  # no bar per checkpoint save
    assert len((output / "generated_predictions.txt").read_text().splitlines()) == 8
    for checkpoint in (output, output / "checkpoint-1"):
        assert AutoModelForSeq2SeqLM.from_pretrained(checkpoint).config.model_type == "talk"


def _run_clm(tmp_path, model_type: str, *flags: str) -> str:
    """run_clm.py fine-tuning a fresh tiny ``model_type`` LM on WikiText's first 100 lines (blocks of 32)
    into ``tmp_path/out``, evaluated; its output, after checking that the perplexity is > 1."""
    lines = load_columns(WIKITEXT, "train", ["text"], limit=100)["text"]
    start = tiny_checkpoint(tmp_path / "start", model_type, lines, False, kind="word", vocab_size=2000)
    printed = run(
        "language-modeling/run_clm.py",
        *("--model_name_or_path", start, "--data_dir", WIKITEXT, "--output_dir", tmp_path / "out"),
        *"--do_train --do_eval --max_train_samples 100 --block_size 32".split(),
        *flags,
        *TRAINER,
    )
    assert json.loads((tmp_path / "out" / "eval_results.json").read_text())["perplexity"] > 1
    return printed


def test_run_clm_fine_tunes_and_reports_perplexity(tmp_path):
    output = tmp_path / "out"
    printed = _run_clm(tmp_path, "light_conv")
    assert "Writing model shards" not in printed
    for checkpoint in (output, output / "checkpoint-2"):
        model = AutoModelForCausalLM.from_pretrained(checkpoint)
        assert model.config.model_type == "dynamic_conv_lm" and model.config.conv_type == "light_conv"


def test_run_clm_trains_on_packed_lines_with_data_collator_with_flattening(tmp_path):
    """--packing: lines as documents, each batch flattened into one row; evaluation keeps the blocks."""
    _run_clm(tmp_path, "talk", "--packing")
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert all(math.isfinite(entry["loss"]) for entry in state["log_history"] if "loss" in entry)
