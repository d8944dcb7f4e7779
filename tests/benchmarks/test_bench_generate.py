"""bench_generate.py end to end at tiny sizes: every model is timed at every position of the chosen
settings, and the summary's ratios are the ones its docstring defines."""

import json
import subprocess
import sys

import pytest

from .conftest import BENCHMARKS


def test_the_script_times_every_model_at_every_position(tmp_path):
    out = tmp_path / "generate.json"
    subprocess.run(
        [
            sys.executable,
            "bench_generate.py",
            "--device",
            "cpu",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--heads",
            "2",
            "--ffn",
            "32",
            "--vocab",
            "40",
            "--positions",
            "4",
            "12",
            "--steps",
            "2",
            "--rounds",
            "1",
            "--warmup",
            "1",
            "--source-length",
            "5",
            "--settings",
            "greedy-b1",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        cwd=BENCHMARKS,
        check=True,
        capture_output=True,
    )
    report = json.loads(out.read_text())
    assert list(report["settings"]) == ["greedy-b1"] and list(report["results"]) == ["greedy-b1"]
    results, summary = report["results"]["greedy-b1"], report["summary"]["greedy-b1"]
    assert len(results) == 6  # three language models, three seq2seq models
    for name, per_position in results.items():
        assert set(per_position) == {"4", "12"}
        assert all(measured["steps"] == 2 for measured in per_position.values())
        baseline = (
            "Marian (baseline)"
            if name in ("TaLKForConditionalGeneration", "DynamicConvForConditionalGeneration", "Marian (baseline)")
            else "GPT2 (baseline)"
        )
        assert summary[name]["over_baseline_at_12"] == pytest.approx(
            per_position["12"]["step_cpu_s"] / results[baseline]["12"]["step_cpu_s"]
        )
    # Ours keep a fixed-size state; the baselines' key/value caches grow with the position.
    assert results["TaLKForCausalLM"]["4"]["state_bytes"] == results["TaLKForCausalLM"]["12"]["state_bytes"]
    assert results["GPT2 (baseline)"]["4"]["state_bytes"] < results["GPT2 (baseline)"]["12"]["state_bytes"]
