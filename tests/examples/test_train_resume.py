"""The Accelerate scripts never lose work: an interrupted run resumes exactly, two processes equal one
with the same global batch (and resume as one), FSDP on visible GPUs matches plain training and
resumes exactly."""

import json
import sys

import pytest
import torch
from common.pacing import STOP_AFTER_STEPS
from transformers import AutoModelForSeq2SeqLM

import talk_hf  # noqa: F401  (registers our models with the Auto classes)

from .conftest import EXAMPLES, LANGUAGE_MODELING, TRANSLATION, read_log, requires_data, run

pytestmark = [requires_data, pytest.mark.slow]  # subprocess runs of the scripts
# Two CPU processes on gloo. `accelerate launch --cpu --num_processes 2` would start only one (it
# needs MPI for CPU); the multi-process launcher plus ACCELERATE_USE_CPU gives gloo processes.
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]  # `accelerate launch` of this Python
TWO_PROCESSES = [*ACCELERATE, *"--multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no".split()]


def without_time(records):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


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
