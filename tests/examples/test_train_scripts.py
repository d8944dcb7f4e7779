"""The Accelerate scripts end to end on tiny slices of shared/data: every model type, checkpoints
that the Auto classes reload, exact resume, and two processes equal to one."""

import json
import re
import sys

import pytest
import torch
from common.hub import hub_folder
from common.pacing import STOP_AFTER_STEPS
from common.records import describe_package_source
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import (
    EXAMPLES,
    LANGUAGE_MODELING,
    SLICENET_TRANSLATION,
    TRANSLATION,
    load_script,
    read_log,
    requires_data,
    run,
)

pytestmark = [requires_data, pytest.mark.slow]  # subprocess runs of the scripts
LM_MODEL_TYPES = ["talk", "dynamic_conv", "light_conv", "transformer"]
TRANSLATION_MODEL_TYPES = [*LM_MODEL_TYPES, "slicenet"]
# Two CPU processes on gloo. `accelerate launch --cpu --num_processes 2` would start only one (it
# needs MPI for CPU); the multi-process launcher plus ACCELERATE_USE_CPU gives gloo processes.
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]  # `accelerate launch` of this Python
TWO_PROCESSES = [*ACCELERATE, *"--multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no".split()]


def without_time(records):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.mark.parametrize("model_type", TRANSLATION_MODEL_TYPES)
def test_translation_trains_evaluates_saves_and_reloads(tmp_path, model_type):
    report = model_type == "talk"  # the final test-set report (reload, BLEU, translations), once
    flags = ["--model_type", model_type, "--output_dir", tmp_path, *"--max_steps 2 --eval_every 2".split()]
    flags += ["--save_every", "1", "--test_split", "test" if report else ""]
    flags += ["--threads", "1"] if report else []
    if model_type in ("dynamic_conv", "light_conv"):  # bf16 autocast (CPU here), as GPU runs train
        flags += ["--mixed_precision", "bf16"]
    output = run("translation/train.py", *(SLICENET_TRANSLATION if model_type == "slicenet" else TRANSLATION), *flags)
    steps, evaluations = read_log(tmp_path)
    assert [r["step"] for r in steps] == [1, 2] and all(r["tokens"] > 0 for r in steps)
    assert [r["step"] for r in evaluations] == [2] and 0 <= evaluations[0]["bleu"] <= 100
    # The test line names the split as the data spells it: `--test_split test` finds test_2016_flickr.
    assert ("test (test_2016_flickr) with" in output and "->" in output) == report
    assert "Writing model shards" not in output  # no progress bar per save in the training log
    if report:
        test_results = json.loads((tmp_path / "test_results.json").read_text())
        assert test_results["split"] == "test_2016_flickr" and 0 <= test_results["test_bleu"] <= 100
        report_line = next(line for line in output.splitlines() if line.startswith("test (test_2016_flickr) with"))
        assert "test_loss" in report_line and "test_bleu" in report_line and "valid" not in report_line
    for checkpoint in ("best", "last"):
        model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / checkpoint)
        assert model.config.model_type == (
            "marian" if model_type == "transformer" else model_type.replace("light_conv", "dynamic_conv")
        )
    assert json.loads((tmp_path / "last" / "training_state.json").read_text())["step"] == 2
    settings = json.loads((tmp_path / "args.json").read_text())  # given flags and defaults alike
    assert (
        settings["model_type"] == model_type
        and settings["max_steps"] == 2
        and settings["max_tokens"] > 0
        and settings["num_processes"] == 1
    )
    environment = json.loads((tmp_path / "environment.json").read_text())  # where it trained
    assert environment["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert environment["processes"] == 1 and environment["versions"]["torch"] == torch.__version__
    assert environment["device"].startswith("cuda" if torch.cuda.is_available() else "cpu")  # Accelerate picks
    if report:  # --threads 1
        assert environment["torch_threads"] == 1
    assert environment["talk_hf_source"] == describe_package_source()  # the code it ran
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "best")
    batch = tokenizer(["Ein Hund läuft."], return_tensors="pt")
    assert model.generate(**batch, max_new_tokens=5).shape[0] == 1
    # What --push_to_hub uploads: our models carry their code for trust_remote_code.
    hub_config = json.loads((hub_folder(tmp_path) / "config.json").read_text())
    assert ("auto_map" in hub_config) == (model_type != "transformer")


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


def test_interrupted_run_resumes_exactly(tmp_path):
    """Kill after step 7 with state saved at step 6 (mid-epoch 1), resume: the same losses as without.

    10 lines make 17 blocks, 5 steps per epoch: the run crosses two epoch ends, one of them after
    the resume, and dropout is on, so the restored RNG states matter too. The final average of the
    weights at steps 5, 10 and 12 (--average_last 3) needs the step-5 weights from the saved state.
    """
    args = [*LANGUAGE_MODELING, *"--model_type talk --dropout 0.3 --max_train_samples 10".split()]
    args += [*"--max_steps 12 --eval_every 5 --save_every 3 --average_last 3".split(), "--test_split", ""]
    run("language-modeling/train.py", *args, "--output_dir", tmp_path / "whole")
    run("language-modeling/train.py", *args, "--output_dir", tmp_path / "cut", env={STOP_AFTER_STEPS: "7"})
    cut_steps, _ = read_log(tmp_path / "cut")
    assert [r["step"] for r in cut_steps] == list(range(1, 8))
    output = run("language-modeling/train.py", *args, "--output_dir", tmp_path / "cut", "--resume")
    assert "resumed from" in output and "at step 6" in output
    whole_steps, whole_evals = read_log(tmp_path / "whole")
    resumed_steps, resumed_evals = read_log(tmp_path / "cut")
    assert max(r["epoch"] for r in whole_steps) >= 2  # the run crosses epochs, the cut is mid-epoch
    assert without_time(resumed_steps) == without_time(whole_steps)
    assert without_time(resumed_evals) == without_time(whole_evals)
    assert [(r["step"], r.get("averaged")) for r in whole_evals] == [(5, None), (10, None), (12, None), (12, 3)]
    best = json.loads((tmp_path / "whole" / "best" / "training_state.json").read_text())
    assert best["valid_ppl"] == min(r["valid_ppl"] for r in whole_evals)
    assert best.get("averaged") == (3 if whole_evals[-1]["valid_ppl"] == best["valid_ppl"] else None)


def assert_same_training(expected_records, records, keys=("loss", "valid_loss", "bleu", "tokens")):
    """Record by record, ``keys`` equal up to the order of float32 additions (relative 1e-5)."""
    for a, b in zip(expected_records, records, strict=True):
        for key in keys:
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5), (key, a, b)


def test_two_processes_match_one_with_the_same_global_batch_and_resume_as_one(tmp_path):
    """2 gloo processes x 1 micro-batch == 1 process x 2 accumulated micro-batches.

    Both see the same micro-batches in each step and normalise by the same global token count, so
    only the order of float32 additions differs (DDP's all-reduce vs accumulation): a relative
    tolerance of 1e-5 covers that, while other data or another normalisation shows at 1e-3 (the
    losses of consecutive steps here already differ by that much). The two-process run is cut
    after step 3, with its state saved (and the model evaluated) at step 2: its steps and its
    evaluation are the one-process run's. It resumes in one process only with --allow_changed_args,
    and then goes on with the batches the two processes had not trained: the resumed run's whole
    log and final weights are the one-process run's.
    """
    args = [*TRANSLATION, *"--model_type transformer --dropout 0 --max_steps 4 --eval_every 2".split()]
    args += ["--test_split", ""]
    run("translation/train.py", *args, "--output_dir", tmp_path / "one", "--gradient_accumulation_steps", 2)
    one_steps, one_evals = read_log(tmp_path / "one")
    assert [r["step"] for r in one_evals] == [2, 4]

    cut, stop = tmp_path / "cut", {STOP_AFTER_STEPS: "3", "ACCELERATE_USE_CPU": "1"}
    run("translation/train.py", *args, "--output_dir", cut, "--save_every", 2, launcher=TWO_PROCESSES, env=stop)
    two_steps, two_evals = read_log(cut)
    assert [r["step"] for r in two_steps] == [1, 2, 3] and [r["step"] for r in two_evals] == [2]
    assert_same_training(one_steps[:3] + one_evals[:1], two_steps + two_evals)

    as_one = [*args, "--output_dir", cut, "--resume", "--gradient_accumulation_steps", 2]
    with pytest.raises(AssertionError, match="--num_processes 2 then, 1 now"):
        run("translation/train.py", *as_one)
    output = run("translation/train.py", *as_one, "--allow_changed_args")
    assert "resuming with 1 process(es) where the saved run had 2: epoch 0 goes on from its batch 4" in output
    resumed_steps, resumed_evals = read_log(cut)
    assert_same_training(one_steps + one_evals, resumed_steps + resumed_evals)
    one = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "one" / "last").state_dict()
    for name, tensor in AutoModelForSeq2SeqLM.from_pretrained(cut / "last").state_dict().items():
        torch.testing.assert_close(tensor, one[name], rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_the_plain_command_trains_on_a_visible_gpu(tmp_path):
    """Without `accelerate launch` the script trains on the GPU when one is visible (Accelerate picks
    it), and says so in environment.json."""
    flags = ["--model_type", "talk", "--output_dir", tmp_path, *"--max_steps 2 --eval_every 2".split()]
    run("translation/train.py", *TRANSLATION, *flags, "--test_split", "")
    environment = json.loads((tmp_path / "environment.json").read_text())
    assert environment["device"].startswith("cuda") and environment["gpus"]
    assert [r["step"] for r in read_log(tmp_path)[0]] == [1, 2]


@pytest.mark.gpu
def test_fsdp_matches_plain_training_and_resumes_exactly(tmp_path):
    """examples/accelerate/fsdp.yaml (FSDP2, our blocks as shard units) on every visible GPU.

    Against one process without FSDP that accumulates as many micro-batches as there are GPUs (the
    same global batch): the same losses and final weights up to summation order. Then a run cut
    after step 3, with its sharded state saved at step 2, resumes to exactly the uncut run's logs.
    Accelerate turns FSDP on only on accelerators; tests/models/test_fsdp.py shards on the CPU.
    """
    gpus = torch.cuda.device_count()
    args = [*TRANSLATION, *"--model_type talk --dropout 0 --max_steps 4 --eval_every 4 --save_every 2".split()]
    args += ["--test_split", ""]
    launcher = [*ACCELERATE, "--config_file", EXAMPLES / "accelerate" / "fsdp.yaml"]
    kernels = {"TALK_HF_BACKEND": "auto"}  # both runs on the CUDA kernels: only FSDP differs
    fsdp = {"launcher": [*launcher, "--num_processes", str(gpus), "--mixed_precision", "no"], "env": kernels}
    run(
        "translation/train.py",
        *args,
        "--output_dir",
        tmp_path / "one",
        "--gradient_accumulation_steps",
        gpus,
        env=kernels,
    )
    run("translation/train.py", *args, "--output_dir", tmp_path / "fsdp", **fsdp)
    assert list((tmp_path / "fsdp" / "state").glob("pytorch_model_fsdp_0*")), "the training state is not sharded"
    one_steps, one_evals = read_log(tmp_path / "one")
    fsdp_steps, fsdp_evals = read_log(tmp_path / "fsdp")
    for a, b in zip(one_steps + one_evals, fsdp_steps + fsdp_evals, strict=True):
        for key in ("loss", "valid_loss"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4), (key, a, b)
    one = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "one" / "last").state_dict()
    for name, tensor in AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "fsdp" / "last").state_dict().items():
        torch.testing.assert_close(tensor, one[name], rtol=1e-3, atol=1e-5, msg=name)

    cut = {**fsdp, "env": {**kernels, STOP_AFTER_STEPS: "3"}}
    run("translation/train.py", *args, "--output_dir", tmp_path / "cut", **cut)
    output = run("translation/train.py", *args, "--output_dir", tmp_path / "cut", "--resume", **fsdp)
    assert "at step 2" in output
    resumed_steps, resumed_evals = read_log(tmp_path / "cut")
    assert without_time(resumed_steps) == without_time(fsdp_steps)
    assert without_time(resumed_evals) == without_time(fsdp_evals)


@pytest.mark.parametrize(
    "script, flags, message",
    [
        ("translation/train.py", ["--data_dir", "/no/such/folder"], "--data_dir /no/such/folder is not a folder"),
        ("translation/train.py", ["--push_to_hub"], "--push_to_hub needs --hub_model_id"),
        ("translation/train.py", ["--label_smoothing", "1.5"], "--label_smoothing must be in"),
        ("language-modeling/train.py", ["--max_tokens", "64", "--block_size", "128"], "holds no block"),
        ("language-modeling/train.py", ["--gradient_accumulation_steps", "0"], "must be >= 1"),
        ("translation/train.py", ["--average_last", "1"], "--average_last must be 0 \\(off\\) or >= 2"),
    ],
)
def test_bad_flags_fail_with_a_clear_message(tmp_path, script, flags, message):
    with pytest.raises(SystemExit, match=message):
        load_script(script).parse_args(["--output_dir", str(tmp_path), *flags])
