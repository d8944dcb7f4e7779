"""bench_train.py: a training step of every model at tiny sizes, the memory figures, the ratios,
and out-of-memory children recorded as results."""

import contextlib
import io
import json
import math
import subprocess
import sys

import bench_train
import pytest
import torch
from _models import baseline_of, causal_lm_models, seq2seq_models

TINY = [
    "--d-model",
    "16",
    "--layers",
    "2",
    "--heads",
    "2",
    "--ffn",
    "32",
    "--vocab",
    "50",
    "--source-length",
    "12",
    "--target-length",
    "6",
    "--blocks",
    "8",
    "16",
    "--tokens",
    "32",
    "--seq2seq-rows",
    "2",
    "--warmup",
    "1",
    "--steps",
    "2",
    "--threads",
    "1",  # tiny operators: a second thread only waits for the first (and for other processes' load)
]


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """`bench_train.main` sets torch's threads from --threads: the other tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


MEASURED_FIELDS = {
    "status": str,
    "step_s": float,
    "step_times_s": list,
    "memory_before_bytes": int,
    "peak_memory_bytes": int,
    "training_memory_bytes": int,
    "parameters": int,
    "final_loss": float,
    "rows": int,
    "tokens_per_step": int,
    "tokens_per_s": float,
}
RATIOS = {"tokens_per_s_over_baseline", "peak_memory_over_baseline", "training_memory_over_baseline"}


def children_in_this_process(monkeypatch):
    """Run each child command line of `run_in_subprocess` through `main` in this process (its JSON
    line captured as the child's stdout); returns the list the commands are recorded in.

    A process's peak resident memory (``VmHWM``) is its own: children sharing this process would
    read the peak an earlier child left, often as their whole training memory (0 above the memory
    before it). So the children here read memory from a stand-in whose every reading is 1 MiB above
    the one before: each child's peak lies above its memory before training, as in its own process."""
    commands = []
    readings = iter(range(2**20, 2**40, 2**20))
    monkeypatch.setattr(bench_train, "memory_in_use", lambda device, peak: next(readings))

    def run(command, **kwargs):
        commands.append(command)
        assert command[:3] == [sys.executable, bench_train.__file__, "--one"]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            bench_train.main(command[2:])
        return subprocess.CompletedProcess(command, 0, stdout=printed.getvalue(), stderr="")

    monkeypatch.setattr(bench_train.subprocess, "run", run)
    return commands


@pytest.mark.parametrize("mixed_precision", ["no", "bf16"])
def test_the_report_holds_a_row_of_every_model_at_each_length_and_its_ratios(tmp_path, monkeypatch, mixed_precision):
    """A training step of every model (each child's command line parsed and run here), and the JSON
    the benchmark writes: a row per (model, length) with its fields and their types, the step's
    rows and tokens, and a ratio to the baseline for each row."""
    commands = children_in_this_process(monkeypatch)
    out = tmp_path / "train.json"
    bench_train.main([*TINY, "--mixed-precision", mixed_precision, "--out", str(out)])
    report = json.loads(out.read_text())

    lm, seq2seq = causal_lm_models(), seq2seq_models()
    assert report["benchmark"] == "bench_train" and report["mixed_precision"] == mixed_precision
    assert report["steps"] == {"warmup": 1, "timed": 2} and report["shapes"]["blocks"] == [8, 16]
    assert all(command[command.index("--mixed-precision") + 1] == mixed_precision for command in commands)
    assert len(commands) == 2 * len(lm) + len(seq2seq)  # every LM at both blocks, every seq2seq once
    expected_rows = {
        **{name: {"8": (4, 32), "16": (2, 32)} for name in lm},
        **{name: {"12": (2, 36)} for name in seq2seq},
    }
    assert {name: set(rows) for name, rows in report["results"].items()} == {
        name: set(rows) for name, rows in expected_rows.items()
    }
    for name, per_length in expected_rows.items():
        for length, (rows, tokens) in per_length.items():
            measured = report["results"][name][length]
            assert {key: type(measured.get(key)) for key in MEASURED_FIELDS} == MEASURED_FIELDS, (name, length)
            assert measured["status"] == "ok" and (measured["rows"], measured["tokens_per_step"]) == (rows, tokens)
            assert len(measured["step_times_s"]) == 2  # the median of the timed steps:
            assert min(measured["step_times_s"]) <= measured["step_s"] <= max(measured["step_times_s"])
            assert measured["tokens_per_s"] == pytest.approx(tokens / measured["step_s"])
            assert measured["peak_memory_bytes"] >= measured["memory_before_bytes"] > 0
            assert measured["training_memory_bytes"] == measured["peak_memory_bytes"] - measured["memory_before_bytes"]
            assert math.isfinite(measured["final_loss"]) and measured["parameters"] > 0

            ratios = report["summary"][name][length]
            assert set(ratios) == RATIOS | {"baseline_status"} and ratios["baseline_status"] == "ok"
            assert all(isinstance(ratios[key], float) for key in RATIOS), (name, length, ratios)
            if name == baseline_of(name):
                assert all(ratios[key] == 1.0 for key in RATIOS)
    assert set(report["summary"]) == set(report["results"])


def test_bf16_runs_the_forward_under_autocast():
    """The same seeded steps give another loss in bfloat16 (its rounding), close to float32's."""
    losses = {}
    for mode in ("no", "bf16"):
        args = bench_train.parse_args([*TINY, "--mixed-precision", mode])
        losses[mode] = bench_train.measure_one("TaLKForCausalLM", 16, 2, args)["final_loss"]
    assert losses["bf16"] != losses["no"] and abs(losses["bf16"] - losses["no"]) < 0.1 * losses["no"]


def test_dropout_reaches_every_dropout_of_every_model_and_the_children():
    args = bench_train.parse_args([*TINY, "--dropout", "0"])
    assert bench_train.child_arguments(args)[-2:] == ["--dropout", "0.0"]
    for name in causal_lm_models() + seq2seq_models():
        model = bench_train.build_model(name, bench_train.ModelShape.from_args(args), 32, args.dropout)
        # GPT-2's summary_first_dropout belongs to a classification head its LM does not have.
        probabilities = {
            key: value
            for key, value in model.config.to_dict().items()
            if ("dropout" in key or "pdrop" in key) and isinstance(value, float) and not key.startswith("summary_")
        }
        assert probabilities and set(probabilities.values()) == {0.0}, (name, probabilities)
    default = bench_train.parse_args(TINY)
    assert default.dropout is None and "--dropout" not in bench_train.child_arguments(default)


def test_summary_ratios_and_a_baseline_that_ran_out_of_memory():
    ok = {"status": "ok", "tokens_per_s": 100.0, "peak_memory_bytes": 400, "training_memory_bytes": 200}
    results = {
        "TaLKForCausalLM": {"8": dict(ok, tokens_per_s=300.0, training_memory_bytes=50), "16": ok},
        "GPT2 (baseline)": {"8": ok, "16": {"status": "out of memory", "error": "killed"}},
    }
    summary = bench_train.summarise(results)
    assert summary["TaLKForCausalLM"]["8"]["tokens_per_s_over_baseline"] == 3.0
    assert summary["TaLKForCausalLM"]["8"]["training_memory_over_baseline"] == 0.25
    assert summary["TaLKForCausalLM"]["16"] == {
        "tokens_per_s_over_baseline": None,
        "peak_memory_over_baseline": None,
        "training_memory_over_baseline": None,
        "baseline_status": "out of memory",
    }
    cut_short = bench_train.summarise({"TaLKForCausalLM": {"8": ok}})  # stopped before its baseline ran
    assert cut_short["TaLKForCausalLM"]["8"]["baseline_status"] == "not measured"
    assert cut_short["TaLKForCausalLM"]["8"]["tokens_per_s_over_baseline"] is None


@pytest.mark.parametrize(
    ("returncode", "stderr"), [(-9, ""), (1, "RuntimeError: DefaultCPUAllocator: can't allocate memory")]
)
def test_a_child_that_runs_out_of_memory_is_a_result(monkeypatch, returncode, stderr):
    def fake_run(command, **kwargs):
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)

    monkeypatch.setattr(bench_train.subprocess, "run", fake_run)
    measured = bench_train.run_in_subprocess("GPT2 (baseline)", 16, 2, bench_train.parse_args(TINY))
    assert measured["status"] == "out of memory"


def test_a_child_that_fails_otherwise_raises(monkeypatch):
    def fake_run(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, stdout="", stderr="ValueError: something else")

    monkeypatch.setattr(bench_train.subprocess, "run", fake_run)
    with pytest.raises(RuntimeError, match="something else"):
        bench_train.run_in_subprocess("GPT2 (baseline)", 16, 2, bench_train.parse_args(TINY))


def test_a_model_without_its_baseline_is_refused():
    with pytest.raises(SystemExit):
        bench_train.parse_args([*TINY, "--models", "TaLKForCausalLM"])


@pytest.mark.slow
def test_the_script_measures_in_children_and_writes_json(tmp_path):
    out = tmp_path / "train.json"
    bench_train.main([*TINY, "--blocks", "8", "--models", "TaLKForCausalLM", "GPT2 (baseline)", "--out", str(out)])
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"TaLKForCausalLM", "GPT2 (baseline)"}
    measured = report["results"]["TaLKForCausalLM"]["8"]
    assert measured["status"] == "ok" and measured["rows"] == 4 and measured["tokens_per_step"] == 32
    assert report["summary"]["GPT2 (baseline)"]["8"]["tokens_per_s_over_baseline"] == 1.0
