"""The Accelerate language-modeling script end to end on a tiny slice of WikiText-2: every model type
trains, evaluates, saves checkpoints that the Auto classes reload and generate with; packed documents;
a time budget that stops training and paces the evaluations."""

import json
import re

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import LANGUAGE_MODELING, read_log, requires_data, run

pytestmark = [requires_data, pytest.mark.slow]  # subprocess runs of the scripts
LM_MODEL_TYPES = ["talk", "dynamic_conv", "light_conv", "transformer"]


@pytest.mark.parametrize("model_type", LM_MODEL_TYPES)
def test_language_model_trains_evaluates_saves_and_reloads(tmp_path, model_type):
    report = model_type == "talk"
    flags = ["--model_type", model_type, "--output_dir", tmp_path, *"--max_steps 2 --eval_every 2".split()]
    output = run("language-modeling/train.py", *LANGUAGE_MODELING, *flags, "--test_split", "test" if report else "")
    steps, evaluations = read_log(tmp_path)
    assert [r["step"] for r in steps] == [1, 2] and all(r["tokens"] == 4 * 32 for r in steps)
    assert evaluations[-1]["valid_ppl"] > 1
    assert "test (test) with" in output if report else "test (" not in output
    assert (tmp_path / "test_results.json").exists() == report
    if report:
        assert json.loads((tmp_path / "test_results.json").read_text())["test_ppl"] > 1
    assert "sample:" in output
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "best")
    prompt = AutoTokenizer.from_pretrained(tmp_path / "best")("The game", return_tensors="pt")
    assert model.generate(**prompt, max_new_tokens=4, do_sample=False).shape == (1, prompt["input_ids"].shape[1] + 4)


def test_language_model_trains_on_packed_documents(tmp_path):
    """--packing: rows of whole lines, each step's loss over the tokens its documents predict (fewer
    than the rows' tokens: a document's first token and the padding are not predicted); the
    evaluation keeps the blocks."""
    flags = [*"--model_type talk --packing --max_steps 2 --eval_every 2 --test_split".split(), "", "--output_dir"]
    output = run("language-modeling/train.py", *LANGUAGE_MODELING, *flags, tmp_path)
    packed = re.search(r"(\d+) training rows of 32 tokens packed with (\d+) documents \((\d+\.\d)% padding\)", output)
    assert packed and int(packed[2]) > int(packed[1]) and float(packed[3]) < 50, output
    steps, evaluations = read_log(tmp_path)
    assert [r["step"] for r in steps] == [1, 2] and all(0 < r["tokens"] < 4 * 32 for r in steps)
    assert evaluations[-1]["valid_ppl"] > 1
    assert json.loads((tmp_path / "args.json").read_text())["packing"] is True
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "best").config.model_type == "talk_lm"


def test_a_time_budget_stops_training_and_paces_the_evaluations(tmp_path):
    """--max_train_minutes ends a run long before --max_steps; --eval_every_minutes replaces --eval_every.

    Budget 0.9 s and an evaluation every 0.3 s of training time (evaluation time not counted).
    """
    budget, interval = 0.9, 0.3
    flags = ["--max_steps", 100000, "--max_train_minutes", budget / 60, "--eval_every_minutes", interval / 60]
    output = run("language-modeling/train.py", *LANGUAGE_MODELING, *flags, "--test_split", "", "--output_dir", tmp_path)
    steps, evaluations = read_log(tmp_path)
    # The bar shows the budget (minutes of training time), not the 100,000 steps of --max_steps.
    assert "train (minutes of training time)" in output and f"/{budget / 60:.1f} min" in output
    assert "/100000" not in output
    seconds = [r["seconds"] for r in steps]  # rounded to 0.01 s in the log
    assert [r["step"] for r in steps] == list(range(1, len(steps) + 1)) and len(steps) < 100000
    assert seconds[-1] >= budget - 0.01 and (len(steps) == 1 or seconds[-2] < budget + 0.01)
    assert evaluations[-1]["step"] == len(steps)  # the final evaluation
    paced = evaluations[:-1]  # one per interval passed before the last step, at the step that passes it
    assert [r["step"] for r in paced] == sorted({r["step"] for r in paced})
    if len(steps) > 1:
        assert int((seconds[-2] - 0.01) / interval) <= len(paced) <= int((seconds[-2] + 0.01) / interval)
    for record in paced:
        step_seconds, previous = record["seconds"], seconds[record["step"] - 2] if record["step"] > 1 else 0.0
        assert int((step_seconds + 0.01) / interval) > int((previous - 0.01) / interval), record
    assert all(r["train_tokens"] == 128 * r["step"] for r in evaluations)
    assert json.loads((tmp_path / "last" / "training_state.json").read_text())["step"] == len(steps)
