"""profile_decode.py end to end at tiny sizes: every language model is profiled at every position,
and its summary's ratios are over the same run's baseline (the script had broken unnoticed when
bench_generate's decoder changed: this runs it)."""

import json
import subprocess
import sys

from .conftest import BENCHMARKS


def test_the_script_profiles_every_language_model_at_every_position(tmp_path):
    out = tmp_path / "profile.json"
    tiny = ["--d-model", "16", "--layers", "1", "--heads", "2", "--ffn", "32", "--vocab", "40"]
    subprocess.run(
        [sys.executable, "profile_decode.py", *tiny, "--positions", "4", "12", "--repeats", "2"]
        + ["--source-length", "5", "--threads", "1", "--out", str(out)],
        cwd=BENCHMARKS,
        check=True,
        capture_output=True,
    )
    report = json.loads(out.read_text())
    results, summary = report["results"], report["summary"]
    assert set(results) == set(summary) and len(results) == 3  # TaLK and DynamicConv LMs, GPT-2
    baseline = "GPT2 (baseline)"
    for name, measured in results.items():
        assert set(measured["positions"]) == {"4", "12"}
        for position, profiled in measured["positions"].items():
            assert profiled["step_cpu_s"] > 0 and profiled["operators_per_step"] > 0
            assert profiled["other_cpu_s"] == profiled["step_cpu_s"] - profiled["matrix_products_cpu_s"]
            ratio = profiled["step_cpu_s"] / results[baseline]["positions"][position]["step_cpu_s"]
            assert summary[name][f"step_over_baseline_at_{position}"] == ratio
    assert summary[baseline]["step_over_baseline_at_4"] == 1.0
